"""Renderer, grammar and parser agree with each other (the engine-side check is in test_grammar_engine)."""

import re

import pytest

from service.domains import get_domain
from service.harness import new_state, observe
from service.policy.grammar import escape, max_tokens_for, response_regex
from service.policy.parse import ParseError, parse
from service.policy.render import render_prompt, view_of
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


def test_prompt_shows_only_allowed_verbs_and_the_last_harness_result():
    dom = get_domain("generic")
    s = new_state(task="find pen", domain="generic", mode="inline", bank="b", initial_belief=dom.initial_belief(""))
    s = observe(s, dom, "You see a desk 1.", ["go to desk 1"])
    p = render_prompt(view_of(s, ["track"]))
    assert "track [x]" in p and "recall [" not in p
    assert p.startswith("<|im_start|>system\n") and p.endswith("<|im_start|>assistant\n")
    assert "Admissible: go to desk 1" in p and "Harness:" not in p
    s2 = {**s, "step_harness_calls": 1, "last_result": {"verb": "track", "arg": "pen", "result": "no belief about pen"}}
    assert "Harness: track [pen] -> no belief about pen" in render_prompt(view_of(s2, []))


def test_verb_arguments_are_never_blank():
    rx = response_regex(ADM, ["recall", "note"])
    assert not re.fullmatch(rx, format_response("r", "recall [ ]"))
    assert not re.fullmatch(rx, format_response("r", "note []"))
    assert re.fullmatch(rx, format_response("r", "recall [a ]"))
    with pytest.raises(ParseError, match="needs an argument"):
        parse(format_response("r", "note [  ]"), ADM, ["note"])
    free = response_regex(None, [])
    assert not re.fullmatch(free, format_response("r", " "))
