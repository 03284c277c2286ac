"""Renderer, grammar and parser agree with each other (the engine-side check is in test_grammar_engine)."""

import re

import pytest

from service.domains import get_domain
from service.harness import new_state, observe
from service.policy.grammar import escape, max_tokens_for, response_regex
from service.policy.parse import ParseError, parse
from service.policy.render import MAX_TRANSCRIPT_CHARS
from service.policy.turns import apply_decision, prepare_turn
from service.policy.wire import format_response

ADM = ["go to desk 1", "take pen 2 from desk (1)", "put a.b* in c?d|e [x]"]


@pytest.mark.parametrize("text", [
    format_response("look at desk", "go to desk 1"),
    format_response("", "put a.b* in c?d|e [x]"),
    format_response("where is it", "track [pen 2]"),
    format_response("plan", "commit [take pen]"),
])
def test_well_formed_outputs_match_the_regex_and_parse(text):
    rx = response_regex(ADM, ["track", "commit"])
    assert re.fullmatch(rx, text)
    d = parse(text, ADM, ["track", "commit"])
    assert d.action in ADM or d.kind == "harness"


@pytest.mark.parametrize("text,why", [
    ("<action>go to desk 1</action>", "not <think>"),
    ("<think>x</think><action>fly away</action>", "not admissible"),
    ("<think>x</think><action>recall [desk]</action>", "not allowed"),
    ("<think>x</think><action></action>", "empty"),
    ("<think>x</think><action>go to desk 1</action><action>go to desk 1</action>", "admissible"),
])
def test_bad_outputs_fail_to_parse_and_do_not_match(text, why):
    rx = response_regex(ADM, ["track", "commit"])
    assert not re.fullmatch(rx, text)
    with pytest.raises(ParseError, match=why.split()[-1]):
        parse(text, ADM, ["track", "commit"])


def test_escape_keeps_literals_literal():
    for a in ADM:
        assert re.fullmatch(escape(a), a)
        assert not re.fullmatch(escape(a), a + "x")


def test_free_text_actions_without_admissible_list():
    rx = response_regex(None, [])
    assert re.fullmatch(rx, format_response("r", "open the door slowly"))
    assert parse(format_response("r", "track [door]"), None, []).kind == "env"


def test_max_tokens_bounds_the_longest_valid_output():
    verbs = ["track", "recall"]
    longest = format_response("x" * 96, "recall [" + "y" * 48 + "]")
    assert re.fullmatch(response_regex(ADM, verbs), longest)
    assert max_tokens_for(ADM, verbs) >= len(longest) + 1


def test_prompt_is_the_episode_so_far_and_grows_by_appending():
    dom = get_domain("generic")
    s = new_state(task="find pen", domain="generic", mode="inline", bank="b", initial_belief=dom.initial_belief(""))
    s = observe(s, dom, "You see a desk 1.", ["go to desk 1"])
    t1 = prepare_turn(s, {}, None)
    assert "track [x]" in t1.prompt and "recall [query]" in t1.prompt
    assert t1.prompt.startswith("<|im_start|>system\n") and t1.prompt.endswith("<|im_start|>assistant\n")
    assert "Task: find pen\nYou see a desk 1.\nAdmissible: go to desk 1<|im_end|>" in t1.prompt
    r1 = format_response("look for it", "track [pen]")
    s, result = apply_decision(s, parse(r1, s["admissible"], t1.verbs), dom, {}, t1)
    t2 = prepare_turn(s, {}, None)
    # the next prompt is the previous prompt + its completion + the harness result: a prefix cache serves it
    assert t2.prompt.startswith(t1.prompt + r1 + "<|im_end|>\n")
    assert t2.prompt.endswith(f"<|im_start|>user\ntrack [pen] -> {result}<|im_end|>\n<|im_start|>assistant\n")
    assert t2.pending == []
    r2 = format_response("go", "go to desk 1")
    s, _ = apply_decision(s, parse(r2, s["admissible"], t2.verbs), dom, {}, t2)
    s = observe(s, dom, "You arrive at desk 1.", ["take pen 1 from desk 1"])
    t3 = prepare_turn(s, {}, None)
    assert t3.prompt.startswith(t2.prompt + r2 + "<|im_end|>\n")
    assert "Task:" not in t3.prompt[len(t2.prompt):]   # the task is shown once


def test_alfworld_prompts_omit_the_admissible_list_and_the_transcript_is_bounded():
    dom = get_domain("alfworld")
    task = "put a pen in drawer"
    s = new_state(task=task, domain="alfworld", mode="env_only", bank="b", initial_belief=dom.initial_belief(task))
    obs = "You arrive at desk 1. On the desk 1, you see a pen 1." + " x" * 200
    for _ in range(100):
        s = observe(s, dom, obs, ["go to desk 1", "look"])
        ti = prepare_turn(s, {}, None)
        assert "Admissible:" not in ti.prompt
        s, _ = apply_decision(s, parse(format_response("r", "look"), s["admissible"], ti.verbs), dom, {}, ti)
    assert sum(len(m["content"]) for m in s["transcript"]) <= MAX_TRANSCRIPT_CHARS
    assert s["transcript"][0]["content"].startswith("Task: put a pen in drawer")


def test_verb_arguments_are_never_blank():
    rx = response_regex(ADM, ["recall", "note"])
    assert not re.fullmatch(rx, format_response("r", "recall [ ]"))
    assert not re.fullmatch(rx, format_response("r", "note []"))
    assert re.fullmatch(rx, format_response("r", "recall [a ]"))
    with pytest.raises(ParseError, match="needs an argument"):
        parse(format_response("r", "note [  ]"), ADM, ["note"])
    free = response_regex(None, [])
    assert not re.fullmatch(free, format_response("r", " "))
