"""training.sft's data helpers: whole-episode sequences per trajectory source, source shares, frozen lower adapters."""

from __future__ import annotations

from training.sft import _freeze_below, episodes_of, select_sources


def _rows(game: str, source: str, turns: list[tuple[str, str]]) -> list[dict]:
    """Teacher rows of one episode whose prompts grow by each turn's text (as the renderer writes them)."""
    rows, text = [], "S"
    for obs, completion in turns:
        text += obs
        rows.append({"prompt": text, "completion": completion, "game": game, "mode": "inline", "source": source})
        text += completion
    return rows


def test_an_expert_and_a_dagger_episode_of_one_game_stay_separate_sequences():
    expert = _rows("g1", "search", [("a", "1"), ("b", "2")])
    dagger = _rows("g1", "dagger", [("a", "1"), ("b", "2")])
    seqs = episodes_of(expert + dagger)
    assert [(s["source"], len(s["spans"])) for s in seqs] == [("search", 2), ("dagger", 2)]
    assert seqs[0]["text"] == "Sa1b2"


def test_a_label_that_differs_from_the_executed_action_ends_the_sequence():
    rows = _rows("g1", "dagger", [("a", "1"), ("b", "2")])
    rows[0]["completion"] = "X"          # the expert's label; the next prompt shows what the learner did ("1")
    seqs = episodes_of(rows)
    assert [s["spans"] for s in seqs] == [[(2, 3)], [(4, 5)]]


def test_rows_without_a_source_are_expert_rows():
    rows = _rows("g1", "search", [("a", "1")])
    del rows[0]["source"]
    assert episodes_of(rows)[0]["source"] == "search"


def test_select_sources_keeps_shares_and_drops_unnamed_sources():
    eps = [{"source": "dagger"}] * 200 + [{"source": "search"}] * 200 + [{"source": "walkthrough"}] * 10
    assert select_sources(eps, {}) == eps
    kept = select_sources(eps, {"dagger": 1.0, "search": 0.25})
    counts = {s: sum(e["source"] == s for e in kept) for s in ("dagger", "search", "walkthrough")}
    assert counts["dagger"] == 200 and counts["walkthrough"] == 0
    assert 25 <= counts["search"] <= 75


def test_freeze_below_stops_the_lower_adapters_only():
    import torch

    class Tiny(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.p = torch.nn.ParameterDict({
                name: torch.nn.Parameter(torch.zeros(1)) for name in (
                    "layers_3_lora_A", "layers_20_lora_A", "layers_25_lora_B", "layers_3_weight")})

        def named_parameters(self, *args, **kwargs):   # the dotted names peft gives its parameters
            mapping = {"layers_3_lora_A": "model.layers.3.q_proj.lora_A.default.weight",
                       "layers_20_lora_A": "model.layers.20.q_proj.lora_A.default.weight",
                       "layers_25_lora_B": "model.layers.25.mlp.down_proj.lora_B.default.weight",
                       "layers_3_weight": "model.layers.3.q_proj.base_layer.weight"}
            for key, param in self.p.items():
                yield mapping[key], param

    model = Tiny()
    _freeze_below(model, 20)
    grads = {name: param.requires_grad for name, param in model.named_parameters()}
    assert grads == {"model.layers.3.q_proj.lora_A.default.weight": False,
                     "model.layers.20.q_proj.lora_A.default.weight": True,
                     "model.layers.25.mlp.down_proj.lora_B.default.weight": True,
                     "model.layers.3.q_proj.base_layer.weight": True}


def test_dagger_cap_keeps_the_first_sequences_of_each_dagger_episode():
    eps = ([{"source": "dagger", "game": "g1", "mode": "inline", "i": i} for i in range(6)]
           + [{"source": "dagger", "game": "g2", "mode": "inline", "i": i} for i in range(2)]
           + [{"source": "search", "game": "g1", "mode": "inline", "i": i} for i in range(6)])
    kept = select_sources(eps, {}, dagger_cap=3)
    assert [(e["source"], e["game"], e["i"]) for e in kept] == (
        [("dagger", "g1", i) for i in range(3)] + [("dagger", "g2", i) for i in range(2)]
        + [("search", "g1", i) for i in range(6)])


def test_holdout_data_replaces_the_last_games_as_the_held_out_turns(tmp_path):
    import json

    from training.sft import SFTRunConfig, load_rows

    def teacher(folder: str, games: list[str]) -> str:
        (tmp_path / folder).mkdir()
        rows = [r for g in games for r in _rows(g, "search", [("a", "1"), ("b", "2")])]
        (tmp_path / folder / "inline.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        return str(tmp_path / folder)

    data = teacher("calls", [f"g{i}" for i in range(6)])
    cfg = SFTRunConfig(data=data, modes={"inline": 1.0}, holdout_games=2)
    train, held = load_rows(cfg)
    assert {r["game"] for r in held} == {"g4", "g5"} and {r["game"] for r in train} == {"g0", "g1", "g2", "g3"}
    cfg.holdout_data = teacher("heldout", ["h0"])
    train, held = load_rows(cfg)
    assert {r["game"] for r in held} == {"h0"} and len({r["game"] for r in train}) == 6


def test_replay_data_is_trained_on_beside_data_and_none_of_it_is_held_out(tmp_path):
    import json

    from training.sft import SFTRunConfig, load_rows

    def teacher(folder: str, games: list[str]) -> str:
        (tmp_path / folder).mkdir()
        rows = [r for g in games for r in _rows(g, "search", [("a", "1"), ("b", "2")])]
        (tmp_path / folder / "inline.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        return str(tmp_path / folder)

    round1 = teacher("round1", [f"g{i}" for i in range(4)])
    cfg = SFTRunConfig(data=teacher("round2", [f"g{i}" for i in range(4, 8)]), modes={"inline": 1.0},
                       holdout_games=1, replay_data=[round1])
    train, held = load_rows(cfg)
    assert {r["game"] for r in held} == {"g7"}                          # the last game of data, not of the replay
    assert {r["game"] for r in train} == {f"g{i}" for i in range(7)}
    assert len(train) == 7 * 2
    cfg.modes = {"inline": 0.0}                                          # a mode's share applies to the replay too
    assert load_rows(cfg) == ([], [])
