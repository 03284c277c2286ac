"""training.grpo_episodes: the episode policy gradient on a LoRA model, and one real update (vLLM rollouts on a
fixture game, the adapter swapped into the engine)."""

import json
import shutil

import pytest

pytestmark = pytest.mark.timeout(900)


def _episode_rows():
    from service.policy.wire import IM_END
    p1 = "<|im_start|>user\nYou see a desk 1.<|im_end|>\n<|im_start|>assistant\n"
    c1 = "<think>look</think><action>go to desk 1</action>" + IM_END
    p2 = p1 + c1 + "\n<|im_start|>user\nOn the desk 1, you see a pen 1.<|im_end|>\n<|im_start|>assistant\n"
    c2 = "<think>take it</think><action>take pen 1 from desk 1</action>" + IM_END
    return [{"prompt": p1, "completion": c1, "game": "g", "mode": "inline", "source": "grpo"},
            {"prompt": p2, "completion": c2, "game": "g", "mode": "inline", "source": "grpo"}]


def _lora(tiny_model):
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32)
    model = get_peft_model(model, LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"],
                                             task_type="CAUSAL_LM"))
    return model, AutoTokenizer.from_pretrained(tiny_model)


def _logp(model, seq):
    import torch
    ids = torch.tensor([seq["input_ids"]])
    mask = torch.tensor(seq["completion_mask"], dtype=torch.bool)
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, :-1]
    lp = torch.log_softmax(logits.float(), -1).gather(1, ids[0, 1:, None])[:, 0]
    return float(lp[mask[1:]].sum())


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_a_step_moves_the_episode_tokens_the_way_of_the_advantage(tiny_model, sign):
    import torch

    from training.grpo_episodes import policy_gradient_step, sequences

    model, tok = _lora(tiny_model)
    (seq,) = sequences([{"rows": _episode_rows(), "advantage": sign}], tok, 4096)   # two turns chain into one
    assert sum(seq["completion_mask"]) > 10
    before = _logp(model, seq)
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.5)
    opt.zero_grad()
    loss = policy_gradient_step(model, [seq], bf16=False)
    opt.step()
    after = _logp(model, seq)
    assert (loss > 0) == (sign > 0)                      # -A log p, and log p < 0
    assert (after - before) * sign > 0


def _call_then_act_rows():
    from service.policy.wire import IM_END
    p1 = "<|im_start|>user\nYou see a desk 1.<|im_end|>\n<|im_start|>assistant\n"
    c1 = "<think>plan</think><action>commit [find the pen]</action>" + IM_END
    p2 = p1 + c1 + "\n<|im_start|>user\ncommit [find the pen] -> ok<|im_end|>\n<|im_start|>assistant\n"
    c2 = "<think>go</think><action>go to desk 1</action>" + IM_END
    return [{"prompt": p1, "completion": c1, "game": "g", "mode": "inline", "source": "grpo", "harness": True},
            {"prompt": p2, "completion": c2, "game": "g", "mode": "inline", "source": "grpo", "harness": False}]


def test_call_credit_lowers_only_the_call_turns_tokens_and_a_step_makes_the_call_less_likely(tiny_model):
    import torch

    from training.grpo_episodes import policy_gradient_step, sequences

    model, tok = _lora(tiny_model)
    rows = _call_then_act_rows()
    (seq,) = sequences([{"rows": rows, "advantage": 0.25}], tok, 4096, call_credit=1.0)
    adv = [a for a, m in zip(seq["token_advantage"], seq["completion_mask"]) if m]
    n_call = len(tok(rows[0]["completion"], add_special_tokens=False)["input_ids"])
    assert adv[:n_call] == [-0.75] * n_call and set(adv[n_call:]) == {0.25}   # -1 on the call, the episode's on the act
    (plain,) = sequences([{"rows": rows, "advantage": 0.25}], tok, 4096)
    assert {a for a, m in zip(plain["token_advantage"], plain["completion_mask"]) if m} == {0.25}

    (tied,) = sequences([{"rows": rows, "advantage": 0.0}], tok, 4096, call_credit=1.0)  # a tied group's episode
    call_only = {**tied, "completion_mask": [m if a < 0 else 0 for a, m in zip(tied["token_advantage"],
                                                                               tied["completion_mask"])]}
    before = _logp(model, call_only)
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.5)
    opt.zero_grad()
    policy_gradient_step(model, [tied], bf16=False)
    opt.step()
    assert _logp(model, call_only) < before


def test_calls_only_puts_the_policy_gradient_on_the_call_turn_alone_and_a_step_leaves_the_action_be(tiny_model):
    import torch

    from training.grpo_episodes import EpisodeGRPOConfig, carries_loss, policy_gradient_step, sequences

    model, tok = _lora(tiny_model)
    rows = _call_then_act_rows()
    (seq,) = sequences([{"rows": rows, "advantage": 0.25}], tok, 4096, call_credit=1.0, calls_only=True)
    adv = [a for a, m in zip(seq["token_advantage"], seq["completion_mask"]) if m]
    n_call = len(tok(rows[0]["completion"], add_special_tokens=False)["input_ids"])
    assert adv[:n_call] == [-0.75] * n_call and set(adv[n_call:]) == {0.0}   # the act's tokens get no gradient

    call_part = {**seq, "completion_mask": [m if a else 0 for a, m in zip(seq["token_advantage"],
                                                                          seq["completion_mask"])]}
    before = _logp(model, call_part)
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.5)
    opt.zero_grad()
    policy_gradient_step(model, [seq], bf16=False)
    opt.step()
    assert _logp(model, call_part) < before

    cfg = EpisodeGRPOConfig(pg_turns="calls")
    assert carries_loss({"advantage": 1.0, "calls": [{"verb": "commit"}]}, cfg)
    assert not carries_loss({"advantage": 1.0, "calls": []}, cfg)          # nothing to move without calls or KL
    assert carries_loss({"advantage": 0.0, "calls": []}, EpisodeGRPOConfig(pg_turns="calls", kl_beta=0.1))
    assert carries_loss({"advantage": 1.0, "calls": []}, EpisodeGRPOConfig())


def test_cut_after_calls_ends_the_sequence_at_the_last_call_token_and_drops_a_callless_one(tiny_model):
    from training.grpo_episodes import sequences

    _, tok = _lora(tiny_model)
    rows = _call_then_act_rows()
    (whole,) = sequences([{"rows": rows, "advantage": 0.25}], tok, 4096, call_credit=1.0, calls_only=True)
    (cut,) = sequences([{"rows": rows, "advantage": 0.25}], tok, 4096, call_credit=1.0, calls_only=True,
                       cut_after_calls=True)
    n = len(cut["input_ids"])
    assert n < len(whole["input_ids"]) and cut["input_ids"] == whole["input_ids"][:n]
    assert len(cut["completion_mask"]) == len(cut["token_advantage"]) == n
    assert cut["token_advantage"][-1] == -0.75                      # the last token is the call's (its IM_END)
    assert tok.decode(cut["input_ids"]).endswith(rows[0]["completion"])
    callless = [dict(r, harness=False) for r in rows]
    assert sequences([{"rows": callless, "advantage": 0.25}], tok, 4096, calls_only=True, cut_after_calls=True) == []


def test_advantages_are_relative_to_each_game_group_and_the_floor_or_ceiling_clips_them():
    from training.grpo_episodes import group_advantages

    rewards = [10.0, 9.0, 0.0, 10.5, 1.0, 1.0, 1.0, 1.0]      # two games of four episodes
    adv = group_advantages(rewards, 4)
    assert sum(adv[:4]) == pytest.approx(0.0) and adv[2] < 0 < adv[3]
    assert adv[4:] == [0.0] * 4                                 # a tied group teaches nothing
    floored = group_advantages(rewards, 4, floor=0.0)
    assert floored[2] == 0.0 and floored[3] == adv[3] and min(floored) == 0.0
    capped = group_advantages(rewards, 4, ceiling=0.0)        # only the worse episodes push anything
    assert capped[2] == adv[2] < 0 and capped[3] == 0.0 and max(capped) == 0.0


def test_loss_weights_are_per_token_or_per_episode():
    from training.grpo_episodes import token_weights

    seqs = [{"episode": 0, "completion_mask": [1] * 30}, {"episode": 0, "completion_mask": [1] * 10},
            {"episode": 1, "completion_mask": [0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1]}]
    tok_w = token_weights(seqs, "token")
    assert tok_w == [1 / 50] * 3
    ep_w = token_weights(seqs, "episode")
    per_episode = [ep_w[0] * 30 + ep_w[1] * 10, ep_w[2] * 10]
    assert per_episode == pytest.approx([0.5, 0.5])       # a long episode weighs what a short one does


def test_the_kl_term_is_zero_at_the_reference_and_pulls_a_moved_adapter_back(tiny_model):
    import torch

    from training.grpo_episodes import policy_gradient_step, sequences, trainable_snapshot

    model, tok = _lora(tiny_model)
    params = [p for p in model.parameters() if p.requires_grad]
    with torch.no_grad():                       # LoRA's B starts at zero: give the reference adapter some effect
        for p in params:
            p.add_(torch.randn_like(p) * 0.05)
    reference = trainable_snapshot(model)
    (seq,) = sequences([{"rows": _episode_rows(), "advantage": 0.0}], tok, 4096)

    stats: dict = {}
    model.zero_grad()
    loss = policy_gradient_step(model, [seq], bf16=False, kl_beta=1.0, reference=reference, stats=stats)
    assert loss == pytest.approx(0.0, abs=1e-6) and stats["kl"] == pytest.approx(0.0, abs=1e-6)
    assert max(float(p.grad.abs().max()) for p in params) < 1e-5

    at_reference = _logp(model, seq)
    with torch.no_grad():                       # move the adapter away, as updates would
        for p in params:
            p.add_(torch.randn_like(p) * 0.2)
    moved = _logp(model, seq)
    assert abs(moved - at_reference) > 0.1
    snapshot = [r.clone() for r in reference]
    opt = torch.optim.SGD(params, lr=0.5)
    gaps = []
    for _ in range(5):
        opt.zero_grad()
        stats = {}
        policy_gradient_step(model, [seq], bf16=False, kl_beta=1.0, reference=reference, stats=stats)
        gaps.append(stats["kl"])
        opt.step()
    assert gaps[0] > 1e-3 and gaps[-1] < gaps[0]              # the penalty alone brings the policy back
    assert abs(_logp(model, seq) - at_reference) < abs(moved - at_reference)
    assert all(torch.equal(r, s) for r, s in zip(reference, snapshot))   # the swaps leave the reference as it was


@pytest.mark.parametrize("rollout_engine", ["lora", "merged"])
def test_two_updates_play_through_vllm_the_second_on_the_first_ones_weights(tiny_model, tiny_lora, tmp_path,
                                                                             rollout_engine):
    from training.envs.alfworld.paths import fixture_games
    from training.grpo_episodes import EpisodeGRPOConfig, run

    policy = tmp_path / "policy"
    shutil.copytree(tiny_lora, policy / "adapter")
    (policy / "policy.json").write_text(json.dumps({"base": "tiny", "adapter": "adapter"}))
    games = tmp_path / "games"
    shutil.copytree(fixture_games()[0], games / fixture_games()[0].name)
    cfg = EpisodeGRPOConfig(policy=str(policy), base=str(tiny_model), games=str(games), out=str(tmp_path / "grpo"),
                            updates=2, games_per_update=1, group=2, concurrency=2, max_env_steps=3,
                            max_length=2048, kv_cache_gib=0.25, rollout_engine=rollout_engine,
                            no_call_share=0.5)   # the second episode of each group is a twin on a budget of 0 calls
    rows = run(cfg)
    assert [r["update"] for r in rows] == [0, 1]
    assert rows[0]["models"] == ["untrained-tiny+grpo"]          # the starting adapter
    assert rows[1]["models"] == ["untrained-tiny+grpo-u1"]       # update 1's rollouts ran on update 0's weights
    assert all(r["won_calls"][1][1] == 0 for r in rows)        # the budget reached the grammar of the engine
    row = rows[0]
    assert row["episodes"] == 2 and row["steps_per_episode"] >= 3
    out = tmp_path / "grpo"
    assert (out / "adapters" / "u1" / "adapter_model.safetensors").exists()
    assert (out / "adapters" / "u1" / "tokenizer_config.json").exists()     # an intermediate adapter exports alone
    assert (out / "adapter" / "adapter_model.safetensors").exists()
    assert json.loads((out / "grpo_report.json").read_text())["log"] == rows
    from safetensors.torch import load_file
    before = load_file(out / "adapters" / "u0" / "adapter_model.safetensors")
    after = load_file(out / "adapters" / "u1" / "adapter_model.safetensors")
    changed = any(not (before[k] == after[k]).all() for k in before)
    assert changed == (row["sequences"] > 0)           # no spread of rewards in the group, no gradient
    assert (out / "adapters" / "u2").exists()
    again = run(cfg)                                     # resumable: nothing left to do
    assert again == rows


def test_paired_rollouts_play_the_last_share_of_each_group_on_the_twin_budget():
    from training.grpo_episodes import group_budgets

    assert group_budgets(4, 2, 0.5) == [None, None, 0, 0, None, None, 0, 0]
    assert group_budgets(4, 1, 0.0) == [None] * 4                  # off: no episode is bounded
    assert group_budgets(8, 1, 0.25, 2) == [None] * 6 + [2, 2]
