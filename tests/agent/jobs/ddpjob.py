"""A DistributedDataParallel session on CPU (gloo): the torchrun test's job."""

from __future__ import annotations

import hashlib
import json
import os
import time

from respot import TrainingSession


class DDPSession(TrainingSession):
    """SGD with momentum on a linear model, data fixed by (step, rank): deterministic."""

    def train(self) -> None:
        import torch
        import torch.distributed as dist

        dist.init_process_group("gloo")
        rank, world = dist.get_rank(), dist.get_world_size()
        print(
            "RANKENV",
            json.dumps({k: os.environ.get(k) for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE")}),
            flush=True,
        )
        torch.manual_seed(0)
        model = torch.nn.Linear(8, 1)
        ddp = torch.nn.parallel.DistributedDataParallel(model)
        opt = torch.optim.SGD(ddp.parameters(), lr=0.01, momentum=0.9)
        total = int(self.hparams.get("steps", 60))
        every = int(self.hparams.get("checkpoint_every", 1000))
        delay = float(self.hparams.get("sleep", 0.05))
        slow_steps = int(self.hparams.get("slow_steps", total))  # steps after these: no sleep
        self.total_steps = total
        step = 0
        path = self.checkpoint_dir / "model.pt"
        if self.resume_step is not None:
            state = torch.load(path)
            model.load_state_dict(state["model"])
            opt.load_state_dict(state["opt"])
            step = state["step"]
        while step < total:
            # Every rank stops at the same step: the flag is agreed on collectively.
            flag = torch.tensor([1 if self.interruption_requested else 0])
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)
            if flag.item():
                deadline = time.monotonic() + 5
                while not self.interruption_requested and time.monotonic() < deadline:
                    time.sleep(0.05)
                print(f"NOTICE rank={rank} seen={self.interruption_requested}", flush=True)
                self._save(step, model, opt, rank)
                break
            g = torch.Generator().manual_seed(step * world + rank)
            x = torch.randn(16, 8, generator=g)
            y = x.sum(dim=1, keepdim=True)
            loss = ((ddp(x) - y) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            step += 1
            self.report(step, loss=loss.item())
            time.sleep(delay if step <= slow_steps else 0.0)
            if step % every == 0:
                self._save(step, model, opt, rank)
        if step >= total and rank == 0:
            blob = b"".join(p.detach().numpy().tobytes() for p in model.parameters())
            (self.output_dir / "weights.sha256").write_text(hashlib.sha256(blob).hexdigest())
        dist.barrier()
        dist.destroy_process_group()

    def _save(self, step: int, model: object, opt: object, rank: int) -> None:
        import torch
        import torch.distributed as dist

        if rank == 0:  # one writer; the weights are the same on every rank
            tmp = self.checkpoint_dir / "model.pt.tmp"
            torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step}, tmp)  # type: ignore[attr-defined]
            tmp.replace(self.checkpoint_dir / "model.pt")
        self.save_checkpoint(step)
        dist.barrier()
