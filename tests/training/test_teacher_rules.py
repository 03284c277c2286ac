"""Teacher rules: recall / commit / track / note are inserted where they are useful, through the real renderer."""

from __future__ import annotations

from service.bank.evolver import new_bank
from training.teacher import render_episode, share_stats
from training.teacher_rules import subgoals_for

ROOM = ("You are in the middle of a room. Looking quickly around you, you see a cabinet 1, a countertop 1, "
        "a drawer 1, a shelf 1, and a table 1.")
PLAN = [
    ("go to table 1", "You arrive at table 1. On the table 1, you see a apple 1, and a bowl 1."),
    ("go to cabinet 1", "You arrive at cabinet 1. The cabinet 1 is closed."),
    ("open cabinet 1", "You open the cabinet 1. The cabinet 1 is open. In it, you see nothing."),
    ("close cabinet 1", "You close the cabinet 1."),
    ("examine shelf 1", "Nothing happens."),
    ("go to drawer 1", "You arrive at drawer 1. The drawer 1 is closed."),
    ("go to shelf 1", "You arrive at shelf 1. On the shelf 1, you see a vase 1."),
    ("go to countertop 1", "You arrive at countertop 1. On the countertop 1, you see a knife 1."),
    ("go to table 1", "You arrive at table 1. On the table 1, you see a apple 1, and a bowl 1."),
    ("take apple 1 from table 1", "You pick up the apple 1 from the table 1."),
    ("go to countertop 1", "You arrive at countertop 1. On the countertop 1, you see a knife 1."),
    ("move apple 1 to countertop 1", "You move the apple 1 to the countertop 1."),
]
ADMISSIBLE = sorted({a for a, _ in PLAN} | {"look", "inventory"})


def trajectory():
    steps = [{"observation": ROOM, "admissible": ADMISSIBLE, "won": False}]
    steps += [{"observation": o, "admissible": ADMISSIBLE, "won": i == len(PLAN) - 1} for i, (_, o) in enumerate(PLAN)]
    return {"game": "g0", "task_text": "put some apple on countertop", "steps": steps,
            "actions": [a for a, _ in PLAN], "won": True, "expert": "test"}


def bank_knowing_apple():
    bank = new_bank()
    bank["entries"]["e1"] = {"id": "e1", "key": "where:apple", "category": "search_priority",
                             "text": "apple is usually at table", "evidence": 3, "uses": 0}
    return bank


def calls(samples):
    return [(s["verb"], s["completion"]) for s in samples if s["kind"] == "harness"]


def test_subgoals_use_the_domain_progress_wording():
    goal = {"object": "apple", "receptacle": "fridge", "toggle": None}
    assert subgoals_for(goal, "pick_cool_then_place_in_recep", {}) == ["take apple", "cool apple",
                                                                        "put apple in fridge"]
    assert subgoals_for({"object": "book", "toggle": "desklamp"}, "look_at_obj_in_light", {}) == [
        "take book", "turn on desklamp"]


def test_inline_teacher_inserts_each_rule_once_where_useful():
    samples, evidence = render_episode(trajectory(), "inline", bank_knowing_apple())
    got = calls(samples)
    verbs = [v for v, _ in got]
    assert verbs[:2] == ["recall", "commit"]                     # rule 1 + 2: start of the episode
    assert "<action>commit [take apple]</action>" in got[1][1]
    assert ("note", "<think>that failed</think><action>note [avoid examine shelf 1]</action><|im_end|>") in got
    track = [i for i, s in enumerate(samples) if s["verb"] == "track"]
    assert len(track) == 1                                       # rule 3: back to the table beyond the window
    assert samples[track[0] + 1]["completion"].startswith("<think>take apple</think><action>go to table 1</action>")
    assert any("commit [put apple on countertop]" in c for _, c in got)  # rule 2: next subgoal after the take
    assert evidence["won"] and evidence["notes"] == ["avoid examine shelf 1"]
    # every prompt is the renderer's ChatML text and every completion ends with the stop token
    assert all(s["prompt"].endswith("<|im_start|>assistant\n") and s["completion"].endswith("<|im_end|>")
               for s in samples)


def test_no_recall_without_bank_knowledge_and_no_verbs_in_other_modes():
    samples, _ = render_episode(trajectory(), "inline", new_bank())
    assert "recall" not in [v for v, _ in calls(samples)]
    for mode in ("always_on", "env_only"):
        rows, _ = render_episode(trajectory(), mode, bank_knowing_apple())
        assert not calls(rows) and len(rows) == len(PLAN)
        assert ("Belief:" in rows[3]["prompt"]) == (mode == "always_on")
    stats = share_stats(render_episode(trajectory(), "inline", bank_knowing_apple())[0])
    assert 0.2 < stats["harness_share"] < 0.5 and stats["by_verb"]["commit"] == 2


LOOK_ROOM = ("You are in the middle of a room. Looking quickly around you, you see a bed 1, a drawer 1, a drawer 2, "
             "a drawer 3, a drawer 4, a drawer 5, a shelf 1, and a sidetable 1.")
LOOK_PLAN = [
    ("go to sidetable 1", "You arrive at sidetable 1. On the sidetable 1, you see a desklamp 1, and a pen 1."),
    *[step for i in range(1, 6) for step in (
        (f"go to drawer {i}", f"You arrive at drawer {i}. The drawer {i} is closed."),
        (f"open drawer {i}", f"You open the drawer {i}. The drawer {i} is open. In it, you see nothing."))],
    ("go to shelf 1", "You arrive at shelf 1. On the shelf 1, you see a book 1."),
    ("take book 1 from shelf 1", "You pick up the book 1 from the shelf 1."),
    ("go to sidetable 1", "You arrive at sidetable 1. On the sidetable 1, you see a desklamp 1, and a pen 1."),
    ("use desklamp 1", "You turn on the desklamp 1."),
]


def test_look_task_tracks_the_lamp_seen_long_ago_before_walking_back_to_it():
    steps = [{"observation": LOOK_ROOM, "admissible": [], "won": False}]
    steps += [{"observation": o, "admissible": sorted({a for a, _ in LOOK_PLAN}), "won": i == len(LOOK_PLAN) - 1}
              for i, (_, o) in enumerate(LOOK_PLAN)]
    steps[0]["admissible"] = steps[1]["admissible"]
    traj = {"game": "g1", "task_text": "look at book under the desklamp", "steps": steps,
            "actions": [a for a, _ in LOOK_PLAN], "won": True, "expert": "test"}
    samples, _ = render_episode(traj, "inline", new_bank())
    track = [i for i, s in enumerate(samples) if s["verb"] == "track"]
    assert [samples[i]["completion"] for i in track] == [
        "<think>where was desklamp</think><action>track [desklamp]</action><|im_end|>"]
    after = samples[track[0] + 1]
    assert "desklamp 1 @ sidetable 1" in after["prompt"][-300:]          # the answer sits next to the decision
    assert "<action>go to sidetable 1</action>" in after["completion"]


def test_commit_share_leaves_some_subgoal_changes_to_the_think():
    """With commit_share 0 only the first turn commits: after the take, the next environment turn's think names the
    new subgoal itself. Share 1 is the default teacher; the draw is seeded by the game, so a rerun renders the same."""
    def commits(share):
        rows, _ = render_episode(trajectory(), "inline", new_bank(), commit_share=share)
        return rows, [c for v, c in calls(rows) if v == "commit"]

    every, every_commits = commits(1.0)
    assert every == render_episode(trajectory(), "inline", new_bank())[0]
    assert len(every_commits) == 2
    none, none_commits = commits(0.0)
    assert none_commits == [every_commits[0]]                    # the plan at the start stays
    take = next(i for i, r in enumerate(none) if "<action>take apple 1 from table 1</action>" in r["completion"])
    assert none[take + 1]["kind"] == "env"
    assert none[take + 1]["completion"].startswith("<think>put apple on countertop</think>")
    assert commits(0.5) == commits(0.5)


def test_first_commit_share_zero_starts_with_the_think_alone():
    """With first_commit_share 0 no episode commits on its first turn: the first environment turn's think names the
    first subgoal. The later commits follow commit_share as before."""
    rows, _ = render_episode(trajectory(), "inline", new_bank(), first_commit_share=0.0)
    every, _ = render_episode(trajectory(), "inline", new_bank())
    assert [c for v, c in calls(rows) if v == "commit"] == [c for v, c in calls(every) if v == "commit"][1:]
    assert rows[0]["kind"] == "env"
    assert rows[0]["completion"].startswith("<think>take apple</think>")


def test_rendering_from_a_served_bank_recalls_what_it_knows():
    from training.teacher import render_mode

    def verbs(bank):
        samples, _ = render_mode([trajectory()], "inline", bank=bank)
        return [v for v, _ in calls(samples)]

    served = bank_knowing_apple()   # a whole entry, as the evolver writes it (it consolidates after the episode)
    served["entries"]["e1"].update(failures=0, pinned=False, data={}, created_in=0, updated_in=0)
    assert "recall" not in verbs(None) and "recall" in verbs(served)


def test_recall_share_zero_starts_without_the_recall():
    """With recall_share 0 no episode recalls, even from a bank that knows the goal object; the commits stay as with
    every recall (the draw is made only below 1, so the default data is unchanged)."""
    from training.teacher import render_mode

    served = bank_knowing_apple()
    served["entries"]["e1"].update(failures=0, pinned=False, data={}, created_in=0, updated_in=0)
    every, _ = render_mode([trajectory()], "inline", bank=served)
    none, _ = render_mode([trajectory()], "inline", bank=served, recall_share=0.0)
    assert [v for v, _ in calls(every)].count("recall") == 1
    assert "recall" not in [v for v, _ in calls(none)]
    assert [c for c in calls(none) if c[0] == "commit"] == [c for c in calls(every) if c[0] == "commit"]


def test_commit_episode_share_gives_each_episode_one_style():
    """commit_episode_share draws per game: an episode commits at every subgoal change (as the default teacher) or
    never, and its environment turns are the same either way. Over many games both styles appear at about the share;
    share 1 is the default data, unchanged."""
    def styled(game: str, share: float):
        traj = dict(trajectory(), game=game)
        rows, _ = render_episode(traj, "inline", new_bank(), commit_episode_share=share)
        return rows, [c for v, c in calls(rows) if v == "commit"]

    every, every_commits = styled("g0", 1.0)
    assert every == render_episode(trajectory(), "inline", new_bank())[0] and len(every_commits) == 2
    styles = []
    for i in range(40):
        rows, commits = styled(f"g{i}", 0.5)
        assert commits in ([], every_commits)
        assert [r["completion"] for r in rows if r["kind"] == "env"] == \
            [r["completion"] for r in every if r["kind"] == "env"]
        styles.append(bool(commits))
    assert 10 <= sum(styles) <= 30
    assert [bool(styled(f"g{i}", 0.0)[1]) for i in range(10)] == [False] * 10
