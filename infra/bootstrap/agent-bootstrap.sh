# respot instance bootstrap: a fixed script. Nothing in it comes from a job spec or from any
# user input; the only deployment values are in /etc/respot/respot.env, which the lines
# above wrote from a quoted heredoc (no shell expansion) with values from the stack itself.
#
# RESPOT_ROOT (unset on EC2) moves every absolute path below under a directory: the local
# runtime runs this same text in a sandbox laid out like the AMI (infra/local/sandbox.py).
# The AMI contract (docs/ami.md): RESPOT_FRAMEWORK_PYTHON is the framework's Python 3.11 or
# 3.12 (on the PyTorch DLAMI /opt/pytorch/bin/python), with pip and boto3 (or the aws CLI).
set -euo pipefail

ROOT="${RESPOT_ROOT:-}"
ENV_FILE="$ROOT/etc/respot/respot.env"
HOME_DIR="$ROOT/opt/respot"
LOG="$ROOT/var/log/respot-bootstrap.log"
PYTHON=""
install -d -m 0755 "$ROOT/var/log"
# Everything below also goes to the log whose tail a failed boot reports.
exec > >(tee -a "$LOG") 2>&1
echo "respot bootstrap: start $(date -u +%Y-%m-%dT%H:%M:%S.%NZ)"

report_boot_failure() {
  # Tell the control plane on the agent channel (AgentBootFailed in respot.wire.messages, in the
  # agent's envelope with seq 0), so that it can count boots that never started training.
  local reason="$1" queue region sender
  queue=$(grep -E "^RESPOT_AGENT_QUEUE_URL=" "$ENV_FILE" 2>/dev/null | head -n 1) || return 1
  # The queue's own region: a satellite region's instances report to the home queue.
  region=$(grep -E "^RESPOT_AGENT_QUEUE_REGION=" "$ENV_FILE" 2>/dev/null | head -n 1) ||
    region=$(grep -E "^AWS_REGION=" "$ENV_FILE" 2>/dev/null | head -n 1) || return 1
  sender="$PYTHON"
  [ -n "$sender" ] && [ -x "$sender" ] || sender=$(command -v python3) || return 1
  sleep 0.2  # let tee write the last lines into the log
  "$sender" - "${queue#*=}" "${region#*=}" "$reason" "$LOG" <<'PY'
import datetime, json, os, sys, urllib.request

queue, region, reason, log = sys.argv[1:5]
imds = os.environ.get("AWS_EC2_METADATA_SERVICE_ENDPOINT", "http://169.254.169.254").rstrip("/")


def metadata(path, token):
    req = urllib.request.Request(f"{imds}/latest/{path}", headers={"X-aws-ec2-metadata-token": token})
    with urllib.request.urlopen(req, timeout=5) as resp:
        return resp.read().decode()


put = urllib.request.Request(
    f"{imds}/latest/api/token", method="PUT",
    headers={"X-aws-ec2-metadata-token-ttl-seconds": "300"},
)
with urllib.request.urlopen(put, timeout=5) as resp:
    token = resp.read().decode()
job_id = metadata("meta-data/tags/instance/respot:job-id", token)
attempt = int(metadata("meta-data/tags/instance/respot:attempt", token))
instance_id = metadata("meta-data/instance-id", token)
try:
    with open(log, encoding="utf-8", errors="replace") as f:
        tail = [line.rstrip("\n")[:1000] for line in f.readlines()[-40:]]
except OSError:
    tail = []
body = json.dumps({
    "schema_version": 1, "job_id": job_id, "attempt": attempt, "instance_id": instance_id,
    "seq": 0, "sent_at": datetime.datetime.now(datetime.timezone.utc).isoformat(),
    "body": {"kind": "boot_failed", "reason": reason[:2000], "log_tail": tail},
})
extra = {}
if queue.endswith(".fifo"):
    extra = {"MessageGroupId": job_id, "MessageDeduplicationId": f"boot-{instance_id}"}
import boto3  # the framework Python's (the AMI contract)

boto3.client("sqs", region_name=region).send_message(QueueUrl=queue, MessageBody=body, **extra)
print(f"respot bootstrap: reported the failed boot of {instance_id} ({job_id} #{attempt})")
PY
}

fail() {
  trap - ERR
  echo "respot bootstrap: $*" >&2
  report_boot_failure "$*" || echo "respot bootstrap: could not report the failed boot" >&2
  # An instance that cannot run the agent must not bill: power off (the launch template
  # terminates on shutdown); the control plane sees the instance go.
  systemctl --no-block poweroff
  exit 1
}
trap 'fail "boot script failed at line $LINENO: $BASH_COMMAND"' ERR

value() {
  # Read KEY=VALUE from the env file without executing it; fails if the key is missing.
  local line
  line=$(grep -E "^$1=" "$ENV_FILE" | head -n 1) || return 1
  printf '%s' "${line#*=}"
}
need() {
  value "$1" || fail "$1 missing from $ENV_FILE"
}

# 1. The framework's Python (the AMI contract); the asset carries a site directory per version.
FRAMEWORK_PYTHON=$(need RESPOT_FRAMEWORK_PYTHON) || exit 1
[ -x "$ROOT$FRAMEWORK_PYTHON" ] || fail "the AMI has no $FRAMEWORK_PYTHON (RESPOT_FRAMEWORK_PYTHON; see docs/ami.md)"
PYTHON="$ROOT$FRAMEWORK_PYTHON"
version=$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])') \
  || fail "$FRAMEWORK_PYTHON does not run"
case "$version" in
  3.11|3.12) ;;
  *) fail "$FRAMEWORK_PYTHON is Python $version; the agent needs 3.11 or 3.12" ;;
esac

# 2. Fetch the agent package (respot plus its packages, built at synth time).
install -d -m 0755 "$HOME_DIR"
ASSET_BUCKET=$(need RESPOT_AGENT_ASSET_BUCKET) || exit 1
ASSET_KEY=$(need RESPOT_AGENT_ASSET_KEY) || exit 1
REGION=$(need AWS_REGION) || exit 1
if command -v aws >/dev/null 2>&1; then
  aws s3 cp --only-show-errors --region "$REGION" \
    "s3://$ASSET_BUCKET/$ASSET_KEY" "$HOME_DIR/agent.zip" \
    || fail "could not download s3://$ASSET_BUCKET/$ASSET_KEY (S3 endpoint, bucket key policy?)"
else
  "$PYTHON" - "$ASSET_BUCKET" "$ASSET_KEY" "$REGION" "$HOME_DIR/agent.zip" <<'PY' \
    || fail "could not download s3://$ASSET_BUCKET/$ASSET_KEY (S3 endpoint, bucket key policy?)"
import sys

import boto3  # the framework Python's (the AMI contract)

bucket, key, region, target = sys.argv[1:5]
boto3.client("s3", region_name=region).download_file(bucket, key, target)
PY
fi
rm -rf "$HOME_DIR/agent"
"$PYTHON" -m zipfile -e "$HOME_DIR/agent.zip" "$HOME_DIR/agent"
rm -f "$HOME_DIR/agent.zip"
if [ ! -d "$HOME_DIR/agent/site-$version" ]; then
  built=$(cd "$HOME_DIR/agent" && ls -d site-* 2>/dev/null | sed 's/^site-//' | tr '\n' ' ')
  fail "the agent package is built for Python ${built:-none} (framework_python_version), but $FRAMEWORK_PYTHON is Python $version: deploy with -c framework_python_version=$version"
fi

# 3. The agent's own environment: a venv of the framework Python WITHOUT its site-packages,
#    whose only addition is the agent package (a .pth runs site.addsitedir on it). The agent
#    never sees the framework's packages and the job never sees the agent's: the session
#    runs on the job's Python and finds respot after its own packages (docs/ami.md).
rm -rf "$HOME_DIR/venv"
"$PYTHON" -m venv --without-pip "$HOME_DIR/venv"
purelib=$("$HOME_DIR/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
printf 'import site; site.addsitedir("%s")\n' "$HOME_DIR/agent/site-$version" > "$purelib/respot.pth"
"$HOME_DIR/venv/bin/python" -c 'import respot.agent' || fail "respot.agent does not import"

# 4. Run the agent as a service. When it stops, for any reason, the instance powers off
#    (and terminates): an instance never idles at GPU prices without an agent.
install -d -m 0755 "$ROOT/etc/systemd/system"
cat > "$ROOT/etc/systemd/system/respot-agent.service" <<'UNIT'
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
echo "respot bootstrap: agent started $(date -u +%Y-%m-%dT%H:%M:%S.%NZ)"
