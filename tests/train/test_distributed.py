"""FSDP2 under torchrun for real (2 processes, gloo on CPU): the sharded step is the one-process step."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from tests.tools.patience import HANG_S  # noqa: E402
from v1.errors import ConfigError  # noqa: E402
from v1.inference import build_tiny_model  # noqa: E402
from v1.train import DistributedConfig, TrainConfig  # noqa: E402
from v1.train._ranks import RankGroup, backend_for, share_samples  # noqa: E402

from . import fsdp_head  # noqa: E402
from .fsdp_steps import MICRO_BATCH_SIZE, SHAPE, batch, new_trainer  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def torchrun(*args: str, timeout: float = 600, ranks: int = 2) -> subprocess.CompletedProcess[str]:
    """``torchrun --standalone --nproc-per-node RANKS ARGS`` in its own session: on a timeout its workers are killed too."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(ranks), *args]
    with subprocess.Popen(
        command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    ) as process:
        try:
            out, err = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            raise
    return subprocess.CompletedProcess(command, process.returncode, out, err)


def test_two_ranks_train_the_same_weights_as_one_process_and_resume_from_the_gathered_checkpoint(tmp_path: Path) -> None:
    shares = [share_samples(batch(step), 2) for step in range(3)]
    # the shares need different numbers of micro-batches: the rank with fewer runs a loss-free pass
    assert any(len({math.ceil(len(share) / MICRO_BATCH_SIZE) for share in pair}) == 2 for pair in shares)

    done = torchrun(str(ROOT / "tests" / "train" / "fsdp_steps.py"), str(tmp_path))
    assert done.returncode == 0, done.stderr[-3000:]
    sharded = torch.load(tmp_path / "weights.pt", weights_only=True)
    report = json.loads((tmp_path / "stats.json").read_text())
    assert report["world"] == 2 and report["step"] == 3

    model, _ = build_tiny_model(SHAPE)
    initial = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    trainer = new_trainer(model)
    stats = [trainer.train_step(batch(step)) for step in range(2)]
    after_two = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    stats.append(trainer.train_step(batch(2)))

    for name, tensor in after_two.items():
        # Adam divides by sqrt(v): float noise from another summation order reaches ~2e-5 on near-zero gradients
        torch.testing.assert_close(sharded["after_two"][name], tensor, atol=5e-5, rtol=1e-4)
    # the third step ran on a fresh sharded model that loaded the gathered optimizer state
    for name, tensor in model.state_dict().items():
        torch.testing.assert_close(sharded["after_three"][name], tensor, atol=5e-5, rtol=1e-4)
    assert sum(not torch.equal(model.state_dict()[name], initial[name]) for name in initial) > len(initial) // 2
    for one, two in zip(stats, report["stats"]):
        for key in ("loss", "grad_norm", "loss_tokens", "clip_fraction", "entropy"):
            assert two[key] == pytest.approx(one[key], rel=1e-4, abs=1e-6), key


@pytest.mark.parametrize("ranks", [1, 2])
def test_a_sharded_model_runs_the_chunked_head_and_the_shared_prefix_forward_with_unsharded_results(
    tmp_path: Path, ranks: int
) -> None:
    # one rank is the GPU failure of `train_gpu.py --fsdp` at world size 1: the head ran outside FSDP2's hooks
    done = torchrun(str(ROOT / "tests" / "train" / "fsdp_head.py"), str(tmp_path), ranks=ranks)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads((tmp_path / "head.json").read_text())
    assert report["world"] == ranks
    weights = torch.load(tmp_path / "step_weights.pt", weights_only=True)
    for tied in (False, True):
        found = report["tied" if tied else "untied"]
        assert found["head_input_dims"] == [2]  # flat chunks of hidden states only: no [B, T, V] logits
        for way in ("chunked", "shared"):
            assert found[f"logprobs_{way}"] <= 1e-5 and found[f"loss_{way}"] <= 1e-4, (tied, way, found)
            assert found[f"grad_{way}"] <= 1e-5, (tied, way, found)
        whole, _ = build_tiny_model({**SHAPE, "tie_word_embeddings": tied})
        trainer = fsdp_head.new_trainer(whole)
        trainer.train_step(fsdp_head.group(0) + fsdp_head.group(1))
        sharded = weights["tied" if tied else "untied"]
        assert sharded.keys() == whole.state_dict().keys()
        for name, tensor in whole.state_dict().items():
            torch.testing.assert_close(sharded[name], tensor, atol=5e-5, rtol=1e-4)


def test_distributed_settings_are_checked() -> None:
    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match=r"nccl.* needs CUDA"):
            backend_for(DistributedConfig(backend="nccl"))
    assert backend_for(DistributedConfig(backend="gloo")) == "gloo"
    with pytest.raises(ConfigError, match=r"distributed\.backend"):
        TrainConfig.model_validate(
            {"model": {}, "env": {"id": "x"}, "inference": {}, "rollouts": {}, "loss": {}, "optim": {}, "eval": {},
             "sft": {}, "wandb": {}, "distributed": {"backend": "mpi"}}
        )  # fmt: skip
    with pytest.raises(ConfigError, match="timeout_s"):
        DistributedConfig(timeout_s=0)


def test_bad_torchrun_variables_are_one_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "zero")
    monkeypatch.setenv("LOCAL_RANK", "0")
    with pytest.raises(ConfigError, match="RANK, WORLD_SIZE and LOCAL_RANK must be integers"):
        RankGroup.start(DistributedConfig(backend="gloo"))
    monkeypatch.delenv("RANK")
    assert not RankGroup.start(DistributedConfig()).distributed  # not under torchrun: one process


# --- the whole run under torchrun: `python -m v1.train` on 2 CPU ranks, as users launch it ---

RECIPE = ROOT / "configs" / "train" / "tiny_first_letter.toml"
VLLM_RECIPE = ROOT / "configs" / "train" / "tiny_first_letter_vllm.toml"
COMPARED = ("loss", "grad_norm", "entropy", "loss_tokens", "clip_fraction", "trainer_tokens")


def short_recipe(recipe: Path, folder: Path, max_steps: int, sft_steps: int | None = None, kl_coef: float = 0.0) -> Path:
    """`recipe` cut to a few RL steps (8 held-out examples), checkpointing every step, written to `folder`.

    The recipe's SFT warm-up stays whole unless `sft_steps` says: without it the random model's
    rewards are all equal and no group trains. `kl_coef` > 0 adds the KL term (and its reference model).
    """
    config = TrainConfig.load(recipe)
    config = config.model_copy(
        update={
            "loss": config.loss.model_copy(update={"kl_coef": kl_coef}) if kl_coef else config.loss,
            "sft": config.sft.model_copy(update={"steps": sft_steps or config.sft.steps}),
            "output_dir": str(folder / "out"),
            "max_steps": max_steps,
            "checkpoint_every": 1,
            "eval": config.eval.model_copy(update={"num_examples": 8}),
        }
    )
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "run.toml"
    path.write_text(config.to_toml())
    return path


def child_env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}


def metrics(config: Path) -> list[dict[str, float]]:
    path = Path(TrainConfig.load(config).output_dir) / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.is_file() else []


@pytest.mark.slow
def test_two_ranks_train_the_tiny_recipe_with_one_process_losses_and_a_loadable_checkpoint(tmp_path: Path) -> None:
    # 3 SFT steps: enough for rewards that differ within groups; few enough that the float noise of
    # another summation order does not flip a sampled token (after 30, the two runs sample different rollouts).
    # A KL term: the ranks' reference is built on the meta device and sharded like the policy.
    # `v1 train --nproc 2` starts the ranks itself (torchrun's launcher in its process, the ranks `python -m v1.train`
    # as a user's own torchrun starts them: the kill tests below launch those); rank 0 alone reports.
    two = short_recipe(RECIPE, tmp_path / "two", max_steps=3, sft_steps=3, kl_coef=0.1)
    one = short_recipe(RECIPE, tmp_path / "one", max_steps=3, sft_steps=3, kl_coef=0.1)
    # Both runs at once: their start-ups (imports, the environment, the model) are mostly one busy process each.
    logs = {name: [(tmp_path / f"{name}.{stream}").open("w") for stream in ("out", "err")] for name in ("two", "one")}
    commands = {
        "two": [sys.executable, "-m", "v1.cli", "train", str(two), "--nproc", "2", "--no-progress"],
        "one": [sys.executable, "-m", "v1.train", str(one), "--no-progress"],
    }
    runs = {
        name: subprocess.Popen(
            command, cwd=ROOT, env=child_env(), stdout=logs[name][0], stderr=logs[name][1], text=True, start_new_session=True
        )
        for name, command in commands.items()
    }
    try:
        codes = {name: run.wait(timeout=HANG_S) for name, run in runs.items()}
    finally:
        for name, run in runs.items():
            if run.poll() is None:
                os.killpg(run.pid, signal.SIGKILL)
            for log in logs[name]:
                log.close()
    out, err = ((tmp_path / f"two.{stream}").read_text() for stream in ("out", "err"))
    assert codes["two"] == 0, err[-3000:]
    assert "v1 train: 3 steps" in out
    assert out.count("v1 train:") == 1, "rank 0 alone reports"
    assert codes["one"] == 0, (tmp_path / "one.err").read_text()[-3000:]
    sharded, whole = metrics(two), metrics(one)
    assert len(sharded) == len(whole) == 3
    for step_two, step_one in zip(sharded, whole, strict=True):
        for key in (*COMPARED, "kl"):  # rank 0 samples the rollouts either way: the same data, split, same denominators
            assert step_two[key] == pytest.approx(step_one[key], rel=1e-4, abs=1e-6), key
    assert sharded[-1]["kl"] > 0.0  # the policy moved away from the sharded reference: the term is live
    checkpoint = tmp_path / "two" / "out" / "checkpoints" / "step_3"
    assert sorted(path.name for path in (checkpoint / "shards").iterdir()) == [
        "rank_0-of-2.safetensors",
        "rank_1-of-2.safetensors",
    ]
    assert json.loads((checkpoint / "hf" / "config.json").read_text())["architectures"] == ["Qwen2ForCausalLM"]
    from transformers import AutoModelForCausalLM

    from v1.train import export_checkpoint

    AutoModelForCausalLM.from_pretrained(export_checkpoint(checkpoint, tmp_path / "exported"))


def children(pid: int) -> list[int]:
    """`pid`'s child processes (whichever of its threads started them); none once it is gone."""
    try:
        return [int(child) for task in Path(f"/proc/{pid}/task").iterdir() for child in (task / "children").read_text().split()]
    except OSError:
        return []


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


def wait_for(check: Callable[[], bool], what: str, timeout: float = HANG_S) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"{what}: not within {timeout:g} s"
        time.sleep(0.5)


class Launch:
    """``torchrun --nproc-per-node 2 -m v1.train CONFIG`` running in the background, output in files, its processes found in /proc."""

    def __init__(self, config: Path, *extra: str) -> None:
        self.folder = config.parent
        self.out, self.err = (open(self.folder / name, "w+") for name in ("torchrun.out", "torchrun.err"))
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
        self.process = subprocess.Popen(
            [*command, "-m", "v1.train", str(config), "--no-progress", *extra],
            cwd=ROOT, env=child_env(), stdout=self.out, stderr=self.err, text=True, start_new_session=True,
        )  # fmt: skip
        self.config = config
        self.seen: set[int] = set()

    def ranks(self) -> dict[int, int]:
        """Rank -> pid of the workers torchrun started."""
        found = {}
        for pid in children(self.process.pid):
            try:
                environ = dict(item.split("=", 1) for item in Path(f"/proc/{pid}/environ").read_text().split("\0") if "=" in item)
            except OSError:
                continue
            if "RANK" in environ:
                found[int(environ["RANK"])] = pid
        self.seen.update(found.values())
        return found

    def trained(self, steps: int) -> bool:
        assert self.process.poll() is None, self.stderr()[-3000:]
        return len(metrics(self.config)) >= steps

    def stderr(self) -> str:
        self.err.flush()
        return (self.folder / "torchrun.err").read_text()

    def close(self) -> None:
        for pid in [self.process.pid, *self.seen]:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
        self.process.wait(timeout=HANG_S)
        self.out.close()
        self.err.close()


def resume_one_step_further(config: Path) -> int:
    """Resume the killed run in one process for one more step than its latest checkpoint; the step it reached."""
    from v1.train._outputs import latest_checkpoint

    checkpoint = latest_checkpoint(Path(TrainConfig.load(config).output_dir))
    assert checkpoint is not None, "the killed run left no complete checkpoint"
    step = json.loads((checkpoint / "run.json").read_text())["step"]
    done = subprocess.run(
        [sys.executable, "-m", "v1.train", str(config), "--resume", "--max-steps", str(step + 1), "--no-progress"],
        cwd=ROOT, env=child_env(), capture_output=True, text=True, timeout=HANG_S, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert metrics(config)[-1]["step"] == step + 1
    return step + 1


def test_killing_torchrun_ends_every_rank_with_one_line_each_and_the_checkpoint_resumes(tmp_path: Path) -> None:
    config = short_recipe(RECIPE, tmp_path, max_steps=200)
    launch = Launch(config)
    try:
        wait_for(lambda: launch.trained(1), "the first step")
        ranks = launch.ranks()
        assert sorted(ranks) == [0, 1]
        os.kill(launch.process.pid, signal.SIGKILL)
        wait_for(lambda: not any(alive(pid) for pid in ranks.values()), "both ranks gone after torchrun's SIGKILL", HANG_S)
        lines = [line for line in launch.stderr().splitlines() if "the launcher (torchrun)" in line]
        assert sorted(line.split(":")[1].strip() for line in lines) == ["rank 0", "rank 1"], launch.stderr()[-3000:]
        assert len(metrics(config)) < 200
    finally:
        launch.close()
    resume_one_step_further(config)


def test_killing_one_rank_ends_the_other_with_one_line(tmp_path: Path) -> None:
    config = short_recipe(RECIPE, tmp_path, max_steps=200)
    launch = Launch(config)
    try:
        wait_for(lambda: launch.trained(1), "the first step")
        ranks = launch.ranks()
        os.kill(ranks[1], signal.SIGKILL)
        launch.process.wait(timeout=HANG_S)
        assert launch.process.returncode != 0
        wait_for(lambda: not alive(ranks[0]), "rank 0 gone", HANG_S)
        stderr = launch.stderr()
        ends = (
            "rank 0: stopped by SIGTERM (torchrun stops every rank when one fails)",
            "rank 0: another rank's connection closed",
        )
        assert any(line in stderr for line in ends), stderr[-3000:]  # torchrun's SIGTERM, or the collective failing first
        assert "Signal 9 (SIGKILL)" in stderr or "exitcode  : -9" in stderr, stderr[-3000:]
    finally:
        launch.close()


# --- the same with the vLLM engine (CPU build, its managed venv: built on first use, minutes) ---


@pytest.fixture(scope="module")
def vllm_ready() -> Path:
    from v1.inference import vllm_python

    return vllm_python()


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_text()
    except OSError:
        return ""


def started_engine(launch: Launch) -> int | None:
    """The session of the vLLM server rank 0 started (its API server's pid), once started."""
    rank_0 = launch.ranks().get(0)
    found = [pid for pid in children(rank_0) if "vllm" in cmdline(pid)] if rank_0 is not None else []
    return found[0] if found else None


def engine_session(launch: Launch) -> int:
    session = started_engine(launch)
    assert session is not None, "rank 0 runs no vLLM"
    return session


@dataclass(frozen=True)
class Killed:
    """What `kill_each_after_its_first_step` killed in one run, and that run's processes at that moment."""

    launch: Launch
    victim: str
    ranks: dict[int, int]
    session: int


def kill_each_after_its_first_step(victims: dict[str, Launch]) -> list[Killed]:
    """SIGKILL each victim (name -> its run) as soon as its run has trained a step, whichever run gets there first."""
    killed: dict[str, Killed] = {}

    def kill_the_ready() -> bool:
        for victim, launch in victims.items():
            if victim not in killed and launch.trained(1):
                ranks, session = launch.ranks(), engine_session(launch)
                os.kill({"engine": session, "rank 0": ranks[0], "launcher": launch.process.pid}[victim], signal.SIGKILL)
                killed[victim] = Killed(launch, victim, ranks, session)
        return len(killed) == len(victims)

    wait_for(kill_the_ready, f"the first step of each of {', '.join(victims)}")
    return [killed[victim] for victim in victims]


def check_the_vllm_run_ends_whole(killed: Killed) -> None:
    """Every process of the killed run ends, with the line that says why."""
    from v1.inference._vllm_server import session_members

    every = lambda: [*(pid for pid in killed.ranks.values() if alive(pid)), *session_members(killed.session)]  # noqa: E731
    wait_for(lambda: not every(), f"every process gone after SIGKILL of {killed.victim}", HANG_S)
    stderr = killed.launch.stderr()
    expected = {
        "engine": (f"vLLM (pid {killed.session}) exited -9 mid-run",),
        "rank 0": ("rank 1: stopped by SIGTERM", "rank 1: another rank's connection closed mid-collective"),
        "launcher": ("rank 0: the launcher (torchrun)",),
    }[killed.victim]
    # rank 1 ends by torchrun's SIGTERM, or first by its collective failing when rank 0's socket closes
    assert any(line in stderr for line in expected), f"{killed.victim}: {stderr[-3000:]}"


@pytest.mark.slow
def test_two_ranks_train_the_vllm_recipe_and_the_run_ends_whole_when_it_finishes_or_loses_a_part(
    tmp_path: Path, vllm_ready: Path
) -> None:
    from v1.inference._vllm_server import session_members
    from v1.train._outputs import latest_checkpoint

    # Four runs start together: one trains 2 steps and exits; in each of the others the engine, rank 0 or the
    # launcher is SIGKILLed as soon as a step has trained. Each run is mostly vLLM's start-up, mostly one busy
    # process: one after another they cost the suite minutes with a core idle. Every victim is killed before
    # any run is checked, each as soon as it can be: a run left training takes the cores the others need.
    victims = ("engine", "rank 0", "launcher")
    finishing = Launch(short_recipe(VLLM_RECIPE, tmp_path / "finishing", max_steps=2))
    launches = {"finishing": finishing}
    try:
        for victim in victims:
            launches[victim] = Launch(short_recipe(VLLM_RECIPE, tmp_path / victim.replace(" ", "_"), max_steps=200))
        wait_for(lambda: started_engine(finishing) is not None, "vLLM started")
        session = engine_session(finishing)
        for each in kill_each_after_its_first_step({victim: launches[victim] for victim in victims}):
            check_the_vllm_run_ends_whole(each)
        assert finishing.process.wait(timeout=HANG_S) == 0, finishing.stderr()[-3000:]
    finally:
        for launch in launches.values():
            launch.close()
    assert [line["step"] for line in metrics(finishing.config)] == [1, 2]
    out = tmp_path / "finishing" / "out"
    assert json.loads((out / "summary.json").read_text())["inference"]["engine"] == "vllm"
    config = json.loads((out / "checkpoints" / "step_2" / "hf" / "config.json").read_text())
    assert config["architectures"] == ["Qwen2ForCausalLM"]
    assert session_members(session) == []
    for victim in victims:
        assert latest_checkpoint(launches[victim].folder / "out") is not None, victim


def test_vllm_gets_gpus_of_its_own_and_the_ranks_share_the_cores_it_leaves() -> None:
    from v1.inference._vllm_engine import vllm_gpus
    from v1.train._run import trainer_cpu_threads

    config = TrainConfig.load(VLLM_RECIPE)
    assert vllm_gpus(config, trainer_gpus=2, visible=None, gpu_count=4) == ["2"], "the first GPU after the trainer's"
    assert vllm_gpus(config, trainer_gpus=1, visible="5,7", gpu_count=2) == ["7"], "indices among the visible GPUs"
    with pytest.raises(ConfigError, match=r"vLLM needs a GPU of its own .* \(--nproc 3\)"):
        vllm_gpus(config, trainer_gpus=4, visible=None, gpu_count=4)
    shared = config.model_copy(update={"inference": config.inference.model_copy(update={"gpus": [0]})})
    with pytest.raises(ConfigError, match=r"GPU 0 trains \(rank 0\).*--gpu-memory-utilization"):
        vllm_gpus(shared, trainer_gpus=1, visible=None, gpu_count=1)
    told = shared.model_copy(
        update={"inference": shared.inference.model_copy(update={"vllm_args": ["--gpu-memory-utilization", "0.4"]})}
    )
    assert vllm_gpus(told, trainer_gpus=1, visible=None, gpu_count=1) == ["0"]
    cpu = torch.device("cpu")
    assert trainer_cpu_threads(config, cpu, cpu_count=16, local_ranks=2) == 7, "16 cores - vLLM's 1 - the loop's 1, halved"
    assert trainer_cpu_threads(config, cpu, cpu_count=2, local_ranks=2) == 1


def test_nproc_is_checked_before_any_rank_starts(tmp_path: Path) -> None:
    from v1.cli import main

    assert main(["train", str(RECIPE), "--nproc", "0"]) == 2
    (tmp_path / "bad.toml").write_text("max_steps = -1\n")
    assert main(["train", str(tmp_path / "bad.toml"), "--nproc", "2"]) == 2
