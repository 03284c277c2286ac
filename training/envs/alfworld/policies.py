"""Policy adapters for the episode driver: the engine's experts, a plain callable, the EvoHarness HTTP service.

All follow :class:`training.envs.alfworld.driver.Policy`: ``reset(task, observation, admissible)`` once per game,
then ``act(observation, admissible, won, done) -> (action, info)`` once per environment step, and one last
``act(..., done=True)`` when the episode is over (its action is ignored; the HTTP policy ends its session there).
``info`` may carry ``harness_calls``, ``prompt_tokens`` and ``completion_tokens``.
"""

from __future__ import annotations

from collections.abc import Callable


class ExpertPolicy:
    """Plays the env's own expert (``planner`` or ``handcoded``); the driver binds it to the env it plays on."""

    def __init__(self, expert_type: str = "handcoded"):
        self.expert_type = expert_type
        self._env = None

    def bind_env(self, env) -> None:
        self._env = env

    def reset(self, task: str, observation: str, admissible: list[str]) -> None:
        if self._env is None or self._env.expert_type != self.expert_type:
            raise RuntimeError(f"ExpertPolicy needs an env built with expert_type={self.expert_type!r}")

    def act(self, observation: str, admissible: list[str], won: bool, done: bool) -> tuple[str, dict]:
        plan = self._env.expert_plan
        return (plan[0] if plan else "look"), {}


class CallablePolicy:
    """Wraps ``fn(task, observation, admissible) -> action | (action, info)``; ``fn`` must be picklable for pools."""

    def __init__(self, fn: Callable):
        self.fn = fn
        self.task = ""

    def reset(self, task: str, observation: str, admissible: list[str]) -> None:
        self.task = task

    def act(self, observation: str, admissible: list[str], won: bool, done: bool) -> tuple[str, dict]:
        if done:
            return "", {}
        out = self.fn(self.task, observation, admissible)
        return (out[0], dict(out[1])) if isinstance(out, tuple) else (out, {})


class HTTPPolicy:
    """Talks to the EvoHarness service: one ``POST /v1/sessions/{id}/step`` per environment step.

    ``reset`` opens a session (``POST /v1/sessions {task, domain, mode, bank}``); ``act`` sends the observation,
    admissible actions, won and done and returns the service's action with its usage; the final ``act`` with
    ``done=True`` ends the session (``POST /v1/sessions/{id}/end {won}``). ``transport`` lets a caller plug an
    ``httpx`` transport (e.g. an ASGI app in process).
    """

    def __init__(self, base_url: str, mode: str = "inline", bank: str = "default", domain: str = "alfworld",
                 timeout: float = 120.0, headers: dict | None = None, transport=None):
        self.base_url = base_url.rstrip("/")
        self.mode, self.bank, self.domain = mode, bank, domain
        self.timeout, self.headers, self.transport = timeout, dict(headers or {}), transport
        self._client = None
        self.session_id: str | None = None
        self.version = None
        self.last_response: dict = {}

    def __getstate__(self):  # the httpx client stays in its process
        state = dict(self.__dict__)
        state["_client"] = None
        return state

    @property
    def client(self):
        if self._client is None:
            import httpx
            kwargs = {"transport": self.transport} if self.transport is not None else {}
            self._client = httpx.Client(base_url=self.base_url, timeout=self.timeout, headers=self.headers,
                                        **kwargs)
        return self._client

    def _post(self, path: str, body: dict) -> dict:
        response = self.client.post(path, json=body)
        response.raise_for_status()
        return response.json() if response.content else {}

    def reset(self, task: str, observation: str, admissible: list[str]) -> None:
        opened = self._post("/v1/sessions", {"task": task, "domain": self.domain, "mode": self.mode,
                                             "bank": self.bank})
        self.session_id, self.version = opened["session_id"], opened.get("version")

    def act(self, observation: str, admissible: list[str], won: bool, done: bool) -> tuple[str, dict]:
        if self.session_id is None:
            raise RuntimeError("reset() before act()")
        if done:
            self.last_response = self._post(f"/v1/sessions/{self.session_id}/end", {"won": bool(won)})
            self.session_id = None
            return "", {}
        reply = self._post(f"/v1/sessions/{self.session_id}/step",
                           {"observation": observation, "admissible_actions": list(admissible),
                            "won": bool(won), "done": bool(done)})
        self.last_response = reply
        usage = reply.get("usage") or {}
        info = {key: usage[key] for key in ("harness_calls", "prompt_tokens", "completion_tokens",
                                            "model_seconds", "total_seconds") if key in usage}
        info["turns"] = reply.get("turns", [])
        return reply["action"], info

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
