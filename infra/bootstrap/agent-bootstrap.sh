# respot instance bootstrap: a fixed script. Nothing in it comes from a job spec or from any
# user input; the only deployment values are in /etc/respot/respot.env, which the lines
# above wrote from a quoted heredoc (no shell expansion) with values from the stack itself.
set -euo pipefail

ENV_FILE=/etc/respot/respot.env
HOME_DIR=/opt/respot

fail() {
  echo "respot bootstrap: $*" >&2
  # An instance that cannot run the agent must not bill: power off (the launch template
  # terminates on shutdown); the control plane sees the instance go and resumes the job.
  systemctl --no-block poweroff
  exit 1
}
trap 'fail "failed at line $LINENO"' ERR

value() {
  # Read KEY=VALUE from the env file without executing it.
  local line
  line=$(grep -E "^$1=" "$ENV_FILE" | head -n 1) || fail "$1 missing from $ENV_FILE"
  printf '%s' "${line#*=}"
}

# 1. A Python >= 3.11 for which the asset carries a site directory.
PYTHON=""
for candidate in python3.12 python3.11 python3; do
  path=$(command -v "$candidate" || true)
  [ -n "$path" ] || continue
  version=$("$path" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null) || continue
  case "$version" in
    3.11|3.12) PYTHON="$path"; break ;;
  esac
done
[ -n "$PYTHON" ] || fail "no Python 3.11 or 3.12 on this AMI"

# 2. Fetch the agent package (respot plus its packages, built at synth time).
install -d -m 0755 "$HOME_DIR"
ASSET_BUCKET=$(value RESPOT_AGENT_ASSET_BUCKET)
ASSET_KEY=$(value RESPOT_AGENT_ASSET_KEY)
REGION=$(value AWS_REGION)
if command -v aws >/dev/null 2>&1; then
  aws s3 cp --only-show-errors --region "$REGION" \
    "s3://$ASSET_BUCKET/$ASSET_KEY" "$HOME_DIR/agent.zip"
else
  "$PYTHON" - "$ASSET_BUCKET" "$ASSET_KEY" "$REGION" "$HOME_DIR/agent.zip" <<'PY'
import sys

import boto3  # the AMI's system boto3 (python3-boto3 on Ubuntu)

bucket, key, region, target = sys.argv[1:5]
boto3.client("s3", region_name=region).download_file(bucket, key, target)
PY
fi
rm -rf "$HOME_DIR/agent"
"$PYTHON" -m zipfile -e "$HOME_DIR/agent.zip" "$HOME_DIR/agent"
rm -f "$HOME_DIR/agent.zip"
version=$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
[ -d "$HOME_DIR/agent/site-$version" ] || fail "the agent package has no site-$version"

# A venv of that Python whose site-packages points at the package (a .pth file): the agent
# and the training session it starts (`sys.executable -m ...`) import respot whatever the
# job's environment says, ahead of the AMI's own packages, which stay visible.
rm -rf "$HOME_DIR/venv"
"$PYTHON" -m venv --without-pip --system-site-packages "$HOME_DIR/venv"
purelib=$("$HOME_DIR/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
printf '%s\n' "$HOME_DIR/agent/site-$version" > "$purelib/respot.pth"
"$HOME_DIR/venv/bin/python" -c 'import respot.agent' || fail "respot.agent does not import"

# 3. Run the agent as a service. When it stops, for any reason, the instance powers off
#    (and terminates): an instance never idles at GPU prices without an agent.
cat > /etc/systemd/system/respot-agent.service <<'UNIT'
[Unit]
Description=respot training agent
Wants=network-online.target
After=network-online.target

[Service]
Type=simple
EnvironmentFile=/etc/respot/respot.env
Environment=PYTHONUNBUFFERED=1
WorkingDirectory=/opt/respot
ExecStart=/opt/respot/venv/bin/python -m respot.agent
ExecStopPost=/usr/bin/systemctl --no-block poweroff
Restart=no

[Install]
WantedBy=multi-user.target
UNIT
systemctl daemon-reload
systemctl enable --now respot-agent.service
