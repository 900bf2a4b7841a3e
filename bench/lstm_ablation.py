"""Ablations of the StatelessCartPole LSTM PPO preset: env steps to a mean return of 350 (issue: ours
needs 1.4-2.5x RLlib's env steps).

    .venv/bin/python bench/lstm_ablation.py [--variants preset,batch4k,...] [--seeds 0,1]
                                            [--max-env-steps 150000] [--runs-dir /tmp/lstm_ablation]
                                            [--list]

Each (variant, seed) is one fresh process running
``ray-sampler train --env StatelessCartPole-v1 --seed S --plain --runs-dir DIR --max-env-steps N
[the variant's flags]``: the preset (learner/presets.py ``_stateless_cartpole``) plus the variant's
flags. The command runs through ``ray_sampler.cli.main`` in a small wrapper process
(``--child``) that (1) records the finished episodes' returns of every iteration (the training
loop's ``ReturnTracker.add``), so RLlib's stop rule can be read off the same run, and (2) for the
LSTM's own settings, which have no CLI flag (the module config), applies ``--x-module-config
JSON`` keys on top of the preset's module config (e.g. ``{"lstm_cell_size": 128}``).

Per variant and seed it reports:
  ours_steps   env steps when the mean of the last 100 finished episodes first reached 350 (the run
               stops there; None: not within the budget), from metrics.csv
  rllib_steps  env steps at the first iteration whose own finished episodes average >= 350 (RLlib
               2.60's ``episode_return_mean`` rule; RLlib's env also has no 500-step limit, ours
               keeps CartPole-v1's), from the recorded per-iteration returns. Our iterations are
               smaller than RLlib's 4,000 steps (fewer episodes each), so this rule is noisier here.
  rllib4k_steps  the same rule on our iterations pooled into disjoint blocks of >= 4,000 env steps
               (RLlib's iteration size): the fairer reading of RLlib's rule
  (medians count a miss as above the budget; None when most seeds missed)
  seconds      wall seconds of the whole process
The last stdout line is one JSON object with every row and the medians per variant.
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
TARGET = 350.0

# name -> extra flags of `ray-sampler train` (after the preset). "--x-module-config JSON" is this
# script's own: module config keys for TorchLSTMModule (no CLI flag sets them).
RLLIB_ARCH = '{"encoder_hidden_sizes": [256, 256], "lstm_cell_size": 256, "head_hidden_sizes": []}'
# RLlib's tuned example's PPO settings where the preset of commit 7f1e9af had others.
RLLIB_PPO = ["--ppo.lr", "3e-4", "--ppo.lambda_", "1.0", "--ppo.clip-param", "0.3", "--ppo.vf-clip-param", "10.0"]


def _without(flags: list[str], flag: str) -> list[str]:
    """``flags`` without ``flag`` and its value."""
    i = flags.index(flag)
    return flags[:i] + flags[i + 2 :]


VARIANTS: dict[str, list[str]] = {
    "preset": [],
    # Run on the preset of the ninth session (2 runners x 4 x 128 = 1,024 env steps an iteration,
    # the lr, lambda, clips and module below them); RLlib: 4,000 env steps per iteration.
    "batch4k": ["--rollout-fragment-length", "512"],
    "batch4k_mb256": ["--rollout-fragment-length", "512", "--ppo.minibatch-size", "256"],
    "batch2k": ["--rollout-fragment-length", "256"],
    "lr3e-4": ["--ppo.lr", "3e-4"],
    "lr5e-4": ["--ppo.lr", "5e-4"],
    "batch4k_lr3e-4": ["--rollout-fragment-length", "512", "--ppo.lr", "3e-4"],
    "seq32": ["--ppo.max-seq-len", "32"],
    "seq10": ["--ppo.max-seq-len", "10"],
    "cell128": ["--x-module-config", '{"lstm_cell_size": 128}'],
    "cell256": ["--x-module-config", '{"lstm_cell_size": 256}'],
    "no_encoder": ["--x-module-config", '{"encoder_hidden_sizes": []}'],
    "ent0.01": ["--ppo.entropy-coeff", "0.01"],
    "mb256": ["--ppo.minibatch-size", "256"],
    "mb64": ["--ppo.minibatch-size", "64"],
    "epochs10": ["--ppo.num-epochs", "10"],
    "epochs3": ["--ppo.num-epochs", "3"],
    "vf0.5": ["--ppo.vf-coeff", "0.5"],
    # combinations on the larger batch
    "batch4k_cell128": ["--rollout-fragment-length", "512", "--x-module-config", '{"lstm_cell_size": 128}'],
    "batch2k_cell128": ["--rollout-fragment-length", "256", "--x-module-config", '{"lstm_cell_size": 128}'],
    "batch4k_ent0.01": ["--rollout-fragment-length", "512", "--ppo.entropy-coeff", "0.01"],
    "batch4k_epochs10": ["--rollout-fragment-length", "512", "--ppo.num-epochs", "10"],
    "batch4k_lr2e-3": ["--rollout-fragment-length", "512", "--ppo.lr", "2e-3"],
    "batch8k": ["--rollout-fragment-length", "1024"],
    "batch4k_seq32": ["--rollout-fragment-length", "512", "--ppo.max-seq-len", "32"],
    "batch4k_lambda1": ["--rollout-fragment-length", "512", "--ppo.lambda_", "1.0"],
    "batch4k_noenc": ["--rollout-fragment-length", "512", "--x-module-config", '{"encoder_hidden_sizes": []}'],
    "batch4k_clip0.5": ["--rollout-fragment-length", "512", "--ppo.grad-clip", "0.5"],
    # RLlib's tuned example as close as the flags go: 4k batch, lr 3e-4, 256-cell LSTM on the filtered
    # observations (no encoder), lambda 1.0 (RLlib's PPO default)
    "rllib_like": [
        "--rollout-fragment-length",
        "512",
        "--ppo.lr",
        "3e-4",
        "--ppo.lambda_",
        "1.0",
        "--x-module-config",
        '{"lstm_cell_size": 256, "encoder_hidden_sizes": []}',
    ],
    "clip0.5": ["--ppo.grad-clip", "0.5"],
    # The variants below were run on the preset of commit 7f1e9af (lr 1e-3, lambda 0.95, clip 0.2,
    # no value clip, 4,096 env steps an iteration); bench/RESULTS.md has their runs. The preset
    # since is rllib_ppo_batch2k.
    # RLlib 2.60's default LSTM model: a tanh MLP of 256 x 256 before a 256-cell LSTM, linear heads.
    "rllib_arch": ["--x-module-config", RLLIB_ARCH],
    "rllib_arch_lr3e-4": ["--x-module-config", RLLIB_ARCH, "--ppo.lr", "3e-4"],
    # ... and RLlib's PPO settings that differ from the old preset's (its KL loss aside).
    "rllib_exact": ["--x-module-config", RLLIB_ARCH, *RLLIB_PPO],
    # RLlib's PPO settings on the preset's module (64-unit encoder, 64 cells, 64-unit heads).
    "rllib_ppo": RLLIB_PPO,
    # rllib_ppo with one of its settings left at the old preset's value, or one more change.
    "rllib_ppo_lr1e-3": _without(RLLIB_PPO, "--ppo.lr"),
    "rllib_ppo_lambda0.95": _without(RLLIB_PPO, "--ppo.lambda_"),
    "rllib_ppo_clip0.2": _without(RLLIB_PPO, "--ppo.clip-param"),
    "rllib_ppo_novfclip": _without(RLLIB_PPO, "--ppo.vf-clip-param"),
    "rllib_ppo_batch2k": [*RLLIB_PPO, "--rollout-fragment-length", "256"],
    "rllib_ppo_batch1k": [*RLLIB_PPO, "--rollout-fragment-length", "128"],
    # On the current preset (rllib_ppo_batch2k): one of its settings back at the old value.
    "old_lr": ["--ppo.lr", "1e-3"],
    "old_lambda": ["--ppo.lambda_", "0.95"],
    "old_clip": ["--ppo.clip-param", "0.2"],
    "old_vfclip": ["--ppo.vf-clip-param", "none"],
    "old_batch": ["--rollout-fragment-length", "512"],
}


def _log(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def child(argv: list[str], returns_path: str) -> None:
    """Runs ``ray-sampler`` with ``argv`` in this process, recording each iteration's returns."""
    sys.path.insert(0, str(ROOT))
    module_extra: dict[str, Any] = {}
    if "--x-module-config" in argv:
        i = argv.index("--x-module-config")
        module_extra = json.loads(argv[i + 1])
        argv = argv[:i] + argv[i + 2 :]
    if module_extra:
        import dataclasses

        import learner.presets as presets

        original = presets._PRESETS["StatelessCartPole-v1"]  # noqa: SLF001 - no public setter

        def preset(base: Any) -> Any:
            cfg = original(base)
            runner = cfg.env_runner
            config = {**dict(runner.module_config), **module_extra}
            return dataclasses.replace(cfg, env_runner=dataclasses.replace(runner, module_config=config))

        presets._PRESETS["StatelessCartPole-v1"] = preset  # noqa: SLF001
    from learner.return_tracker import ReturnTracker

    original_add = ReturnTracker.add
    out = open(returns_path, "w")  # noqa: SIM115 - open for the whole run

    def add(self: Any, returns: list[float], **kwargs: Any) -> None:
        out.write(json.dumps([float(r) for r in returns]) + "\n")
        out.flush()
        original_add(self, returns, **kwargs)

    ReturnTracker.add = add  # type: ignore[method-assign]
    from ray_sampler.cli import main

    main(["train", *argv])


def one_run(variant: str, flags: list[str], seed: int, max_env_steps: int, runs_dir: Path) -> dict[str, Any]:
    run_root = runs_dir / f"{variant}-s{seed}"
    run_root.mkdir(parents=True, exist_ok=True)
    returns_path = run_root / "iteration_returns.jsonl"
    argv = [
        "--env", "StatelessCartPole-v1", "--seed", str(seed), "--plain", "--runs-dir", str(run_root),
        "--max-env-steps", str(max_env_steps), *flags,
    ]  # fmt: skip
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", "--returns", str(returns_path), "--", *argv]
    _log("$ ray-sampler train " + " ".join(argv))
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    (run_root / "stdout.txt").write_text(proc.stdout + "\n--- stderr ---\n" + proc.stderr)
    row: dict[str, Any] = {"variant": variant, "seed": seed, "seconds": round(seconds, 1), "rc": proc.returncode}
    metrics = sorted(run_root.glob("*/metrics.csv"))
    if not metrics:
        row["error"] = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        return row
    with metrics[-1].open() as f:
        records = list(csv.DictReader(f))
    steps = [int(r["env_steps"]) for r in records]
    ours = next(
        (int(r["env_steps"]) for r in records if int(r["window"]) >= 100 and float(r["return_mean"]) >= TARGET),
        None,
    )
    per_iteration = [json.loads(line) for line in returns_path.read_text().splitlines() if line.strip()]
    rllib = next(
        (steps[i] for i, r in enumerate(per_iteration) if i < len(steps) and r and sum(r) / len(r) >= TARGET),
        None,
    )
    row.update(
        ours_steps=ours,
        rllib_steps=rllib,
        rllib4k_steps=pooled_rule(per_iteration, steps),
        env_steps_run=steps[-1] if steps else 0,
        iterations=len(records),
        final_mean_100=round(float(records[-1]["return_mean"]), 1) if records else None,
        loop_s=round(float(records[-1]["elapsed_s"]), 1) if records else None,
    )
    return row


def pooled_rule(per_iteration: list[list[float]], steps: list[int], block: int = 4000) -> int | None:
    """RLlib's rule on RLlib-sized iterations: our iterations pooled into disjoint blocks of at least
    ``block`` env steps (RLlib's 4,000-step train batch); the env steps at the end of the first block
    whose finished episodes average >= 350 (None: none)."""
    pooled: list[float] = []
    start = 0
    for i, returns in enumerate(per_iteration[: len(steps)]):
        pooled.extend(returns)
        if steps[i] - start >= block:
            if pooled and sum(pooled) / len(pooled) >= TARGET:
                return steps[i]
            pooled, start = [], steps[i]
    return None


def _median(values: list[int | None], budget: int) -> float | None:
    """The median with a miss counted as above the budget (None if most missed)."""
    if not values:
        return None
    filled = [v if v is not None else budget + 1 for v in values]
    m = statistics.median(filled)
    return None if m > budget else m


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--variants", default="preset,batch4k,lr3e-4,cell128,seq32,ent0.01,epochs10,mb256")
    parser.add_argument("--seeds", default="0,1")
    parser.add_argument("--max-env-steps", type=int, default=150_000)
    parser.add_argument("--runs-dir", default="/tmp/lstm_ablation")
    parser.add_argument("--list", action="store_true", help="print the variants and exit")
    parser.add_argument("--child", action="store_true")
    parser.add_argument("--returns", default="")
    args, rest = parser.parse_known_args()
    if args.child:
        child([a for a in rest if a != "--"] if rest[:1] == ["--"] else rest, args.returns)
        return
    if args.list:
        for name, flags in VARIANTS.items():
            print(f"{name:<18} {' '.join(flags)}")
        return
    names = args.variants.split(",")
    unknown = [n for n in names if n not in VARIANTS]
    if unknown:
        parser.error(f"unknown variants {unknown} (--list)")
    seeds = [int(s) for s in args.seeds.split(",")]
    runs_dir = Path(args.runs_dir)
    rows: list[dict[str, Any]] = []
    header = f"{'variant':<18}{'seed':>5}{'ours rule':>11}{'RLlib rule':>12}{'RLlib 4k':>10}"
    print(header + f"{'seconds':>9}{'final100':>10}", flush=True)
    for seed in seeds:  # seeds outer: every variant gets the same machine phases per seed
        for name in names:
            row = one_run(name, VARIANTS[name], seed, args.max_env_steps, runs_dir)
            rows.append(row)
            print(
                f"{name:<18}{seed:>5}{row.get('ours_steps')!s:>11}{row.get('rllib_steps')!s:>12}{row.get('rllib4k_steps')!s:>10}"
                f"{row['seconds']:>9.1f}{row.get('final_mean_100')!s:>10}"
                + (f"  {row['error']}" if "error" in row else ""),
                flush=True,
            )
    summary = {}
    for name in names:
        mine = [r for r in rows if r["variant"] == name]
        summary[name] = {
            "flags": VARIANTS[name],
            "median_ours_steps": _median([r.get("ours_steps") for r in mine], args.max_env_steps),
            "median_rllib_steps": _median([r.get("rllib_steps") for r in mine], args.max_env_steps),
            "median_rllib4k_steps": _median([r.get("rllib4k_steps") for r in mine], args.max_env_steps),
            "median_seconds": statistics.median(r["seconds"] for r in mine),
        }
        print(f"median {name:<18} {json.dumps(summary[name])}", flush=True)
    print(json.dumps({"max_env_steps": args.max_env_steps, "rows": rows, "medians": summary}))


if __name__ == "__main__":
    main()
