"""Each patch in patches.py is needed: the upstream behaviour is shown failing, the patched one passing."""

from __future__ import annotations

import random

from training.envs.alfworld import patches
from training.envs.alfworld.env import AlfWorldEnv
from training.envs.alfworld.gamefiles import read_traj


def _alfred_tw_env_first_plan(games_root, expert_type: str) -> list[str]:
    """Build alfworld's own AlfredTWEnv over the fixture games and return the expert plan after reset."""
    from alfworld.agents.environment.alfred_tw_env import AlfredTWEnv

    config = {
        "env": {"goal_desc_human_anns_prob": 0.0, "task_types": [1, 2, 3, 4, 5, 6], "domain_randomization": False,
                "expert_type": expert_type},
        "dataset": {"data_path": str(games_root), "num_train_games": 1},
        "general": {"training_method": "dagger"},
        "dagger": {"training": {"max_nb_steps_per_episode": 50}},
    }
    tw_env = AlfredTWEnv(config, train_eval="train")
    env = tw_env.init_env(batch_size=1)
    try:
        _, infos = env.reset()
        return list(infos["extra.expert_plan"][0])
    finally:
        env.close()


def test_expert_type_is_honoured_by_alfred_tw_env(alf_games):
    root = alf_games[0].parent
    patches.apply()
    with patches.disabled("expert_type"):
        buggy = _alfred_tw_env_first_plan(root, "planner")
    fixed = _alfred_tw_env_first_plan(root, "planner")
    # Upstream silently gives the handcoded expert, whose first plan is always just "look".
    assert buggy == ["look"]
    assert len(fixed) > 1 and fixed[0].startswith("go to")


def _play_handcoded(game, max_steps=40) -> dict:
    env = AlfWorldEnv(expert_type="handcoded", max_steps=max_steps, apply_patches=False)
    state = env.reset(game)
    while not state["done"]:
        state = env.step(state["expert_plan"][0] if state["expert_plan"] else "look")
    env.close()
    return state


def test_handcoded_expert_understands_move(alf_games):
    pick_two = [g for g in alf_games if read_traj(g)["task_type"] == "pick_two_obj_and_place"]
    patches.apply()
    with patches.disabled("handcoded_move"):
        buggy = [_play_handcoded(g) for g in pick_two]
    fixed = [_play_handcoded(g) for g in pick_two]
    assert not all(s["won"] for s in buggy), "upstream handcoded expert should loop on some pick-two game"
    assert all(s["won"] for s in fixed)
    assert patches.move_as_put("move apple 1 to countertop 2") == "put apple 1 in/on countertop 2"
    assert patches.move_as_put("go to countertop 2") == "go to countertop 2"


def _transcript(game, seed: int, steps: int = 25) -> list[str]:
    env = AlfWorldEnv(max_steps=steps, apply_patches=False)
    state = env.reset(game)
    rng = random.Random(seed)
    out = [state["intro"], *state["admissible_actions"]]
    while not state["done"]:
        action = rng.choice(state["admissible_actions"])
        state = env.step(action)
        out += [action, state["observation"], *state["admissible_actions"]]
    env.close()
    return out


def test_memoised_templates_give_byte_identical_transcripts(alf_games):
    games = [alf_games[0], alf_games[7], alf_games[10]]
    patches.apply()
    assert "memoize_templates" in patches.applied()
    with_memo = [_transcript(g, seed=i) for i, g in enumerate(games)]
    with patches.disabled("memoize_templates"):
        assert "memoize_templates" not in patches.applied()
        without = [_transcript(g, seed=i) for i, g in enumerate(games)]
    assert "\n".join(sum(with_memo, [])).encode() == "\n".join(sum(without, [])).encode()
