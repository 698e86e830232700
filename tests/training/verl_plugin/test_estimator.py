"""`oar_grpo` through verl's own `compute_advantage`: bit for bit verl's `grpo` without weights
(both GRPO scalings, groups of one, random masks), A_i * w_t with them; and the entry point
registering it and the `oar_sync` trainer mode on `import verl`, in a process that never
imports the project itself."""
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf
from verl.protocol import DataProto
from verl.trainer.ppo.core_algos import get_adv_estimator_fn
from verl.trainer.ppo.ray_trainer import compute_advantage
from verl.trainer.ppo.v1.utils import compute_advantage_for_multi_trajectories

from oar_attrib.training.verl.estimator import compute_oar_grpo_advantage
from oar_attrib.training.verl.step import sequence_advantages


def _data(seed: int, rows: int = 24, width: int = 17) -> DataProto:
    """Rows in groups of 1-5 with 0/1 and graded rewards on the last response token, right-padded
    random response lengths."""
    g = torch.Generator().manual_seed(seed)
    sizes = []
    while sum(sizes) < rows:
        sizes.append(int(torch.randint(1, 6, (1,), generator=g)))
    uid = np.array([f"u{k}" for k, n in enumerate(sizes) for _ in range(n)][:rows], dtype=object)
    lengths = torch.randint(1, width + 1, (rows,), generator=g)
    mask = (torch.arange(width)[None, :] < lengths[:, None]).long()
    rewards = torch.zeros(rows, width)
    scores = torch.where(torch.rand(rows, generator=g) < 0.5, torch.randint(0, 2, (rows,), generator=g).float(),
                         torch.rand(rows, generator=g))
    rewards[torch.arange(rows), lengths - 1] = scores
    return DataProto.from_dict(tensors={"token_level_rewards": rewards, "response_mask": mask},
                               non_tensors={"uid": uid})


@pytest.mark.parametrize("norm", [True, False])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_oar_grpo_without_weights_is_verls_grpo_bit_for_bit(seed, norm):
    config = OmegaConf.create({"norm_adv_by_std_in_grpo": norm})
    ours = compute_advantage(_data(seed), "oar_grpo", norm_adv_by_std_in_grpo=norm, config=config)
    grpo = compute_advantage(_data(seed), "grpo", norm_adv_by_std_in_grpo=norm, config=config)
    for name in ("advantages", "returns"):
        assert torch.equal(ours.batch[name], grpo.batch[name]), name
        assert ours.batch[name].dtype == grpo.batch[name].dtype
    assert grpo.batch["advantages"].abs().max() > 0.5  # not all zero


def test_the_v1_trainers_road_gives_the_same():
    """v1 computes advantages through compute_advantage_for_multi_trajectories, which treats
    `grpo` specially (each session's final output); single-output sessions agree."""
    config = OmegaConf.create({"norm_adv_by_std_in_grpo": True})
    keys = [f"{uid}_{k}_0" for k, uid in enumerate(_data(3).non_tensor_batch["uid"])]
    ours = compute_advantage_for_multi_trajectories(_data(3), keys, "oar_grpo", config=config)
    grpo = compute_advantage_for_multi_trajectories(_data(3), keys, "grpo", config=config)
    assert torch.equal(ours.batch["advantages"], grpo.batch["advantages"])


def test_with_weights_it_is_a_times_w_on_the_response():
    data = _data(4)
    rewards, mask, uid = data.batch["token_level_rewards"], data.batch["response_mask"], data.non_tensor_batch["uid"]
    weights = torch.rand(mask.shape, generator=torch.Generator().manual_seed(5)) * 2
    plain, _ = compute_oar_grpo_advantage(rewards, mask, uid)
    shaped, returns = compute_oar_grpo_advantage(rewards, mask, uid, oar_weights=weights)
    torch.testing.assert_close(shaped, sequence_advantages(plain, mask)[:, None] * weights * mask)
    assert torch.equal(shaped, returns) and (shaped[mask == 0] == 0).all()
    ones, _ = compute_oar_grpo_advantage(rewards, mask, uid, oar_weights=torch.ones(mask.shape))
    assert torch.equal(ones, plain)  # weights of 1 change nothing, bit for bit


def _fresh(code: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VERL_USE_EXTERNAL_PLUGINS")}
    return subprocess.run([sys.executable, "-W", "ignore", "-c", code], capture_output=True, text=True,
                          timeout=600, env=env | {"OMP_NUM_THREADS": "1"}, cwd="/")


def test_the_entry_point_registers_both_on_import_verl():
    """The issue's check: nothing of the project is imported by the command itself."""
    code = ("import sys, verl\n"
            "from verl.trainer.ppo.core_algos import get_adv_estimator_fn\n"
            "from verl.trainer.ppo.v1 import get_trainer_cls\n"
            "print(get_adv_estimator_fn('oar_grpo').__module__, get_trainer_cls('oar_sync').__name__,"
            " 'oar_attrib' in sys.modules)")
    done = _fresh(code)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split()[-3:] == ["oar_attrib.training.verl.estimator", "OARSyncTrainer", "True"]
    assert get_adv_estimator_fn("oar_grpo") is compute_oar_grpo_advantage


def test_verl_told_to_load_no_plugins_registers_neither():
    code = ("import os; os.environ['VERL_USE_EXTERNAL_PLUGINS'] = 'none'\n"
            "import verl\nfrom verl.trainer.ppo.core_algos import get_adv_estimator_fn\n"
            "try:\n    get_adv_estimator_fn('oar_grpo'); print('registered')\n"
            "except ValueError as err:\n    print('unknown')")
    done = _fresh(code)
    assert done.returncode == 0 and done.stdout.split()[-1] == "unknown", done.stderr[-2000:]
