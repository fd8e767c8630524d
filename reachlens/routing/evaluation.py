"""The evaluation unit of a route search: decode one question along one route, grade it, score it.

**One route evaluation** = the greedy completion of a question's prompt along the route (through
:func:`~reachlens.routing.executor.generate_along_routes`, so the engine's route-aware KV cache is
used), its extracted answer and grade, and two answer-blind confidences from its own token
log-probabilities:

* ``mean_logprob``: the mean log-probability of the generated tokens (the route's own confidence);
* ``lowest_window_logprob``: the lowest mean over a sliding window of ``window`` tokens, the
  DeepConf-style "lowest group confidence" (a completion shorter than the window is one window).
  It is built from the chosen tokens' log-probabilities, not from DeepConf's top-k token confidence.

Greedy decoding is deterministic, so :class:`RouteEvaluator` decodes each (question, route) pair once
and reuses the result: a search that proposes a route twice is charged twice against its budget but
decoded once. Pairs asked for together decode in one engine call, each row along its own route.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from reachlens.engine import Completion
from reachlens.errors import ReachlensError
from reachlens.grading import grade_completion, question_grader
from reachlens.protocol import Protocol
from reachlens.routing.executor import RouteRequest, generate_along_routes
from reachlens.routing.routes import Route, identity_route
from reachlens.selectors import lowest_window_mean
from reachlens.tasks.base import Task
from reachlens.tasks.chat import bind_chat, render_prompts

__all__ = ["Evaluation", "RouteEvaluator"]


@dataclass(frozen=True)
class Evaluation:
    """What evaluating one route on one question produced."""

    route: Route
    text: str
    """The raw completion (kept so that a run can be re-graded)."""
    answer: str | None
    """The grader's extracted answer (None when none was found)."""
    correct: bool
    scored: bool
    """False when the grader could not decide (counted neither right nor wrong)."""
    finish_reason: str
    n_tokens: int
    mean_logprob: float
    lowest_window_logprob: float


class RouteEvaluator:
    """Evaluates (question index, route) pairs on one model and task, each pair decoded once.

    Args:
        model: a TransformerBridge; hooks attached by the caller stay live.
        task: the questions (all of them; use ``task.head(n)`` for fewer).
        protocol: how each route decodes: the greedy case of the one decode spec
            (:meth:`Protocol.greedy`: decode length, prompt format, stop strings, grader); resolved
            against ``task`` and bound to the model's chat template under a chat format, whose prompts are
            rendered as the audit renders them (:func:`~reachlens.tasks.chat.render_prompts`: the same ids,
            one BOS). None: :meth:`Protocol.deployment` of ``task``.
        window: tokens per window of ``lowest_window_logprob``.
        max_batch_rows: most rows decoded together.

    >>> ev = RouteEvaluator(model, task, Protocol.greedy("arith", max_new_tokens=64))  # doctest: +SKIP
    >>> ev.evaluate([(0, (0, 1, 1, 2)), (1, (0, 2))])  # doctest: +SKIP
    """

    def __init__(
        self, model, task: Task, protocol: Protocol | None = None, *, window: int = 8, max_batch_rows: int = 256,
    ) -> None:
        if len(task) == 0:
            raise ReachlensError(f"task {task.name!r} has no questions")
        protocol = protocol or Protocol.deployment(task)
        if not protocol.is_greedy:
            raise ReachlensError(f"a route is decoded greedily; pass a greedy protocol (Protocol.greedy(...)), "
                                 f"not k={protocol.k}, temperature={protocol.temperature}")
        if window < 1:
            raise ReachlensError(f"window={window!r} must be >= 1")
        self.model = model
        self.task = task
        tokenizer = getattr(model, "tokenizer", None)
        self.protocol = bind_chat(protocol.resolved(task), tokenizer)
        self.window = window
        self.max_batch_rows = max_batch_rows
        self.n_layers = len(model.blocks)
        self.prompts = render_prompts(task, self.protocol, task.questions, tokenizer)
        self._graders = [question_grader(str(self.protocol.grader), q) for q in task.questions]
        self._memo: dict[tuple[int, Route], Evaluation] = {}
        self.n_decoded = 0
        """Distinct (question, route) pairs decoded so far (the compute actually spent)."""

    def spec(self) -> dict[str, Any]:
        """What an evaluation depends on besides the model, the route and the protocol (stored with results)."""
        return {"task_source": self.task.source, "n_questions": len(self.task), "window": self.window}

    @property
    def identity(self) -> Route:
        return identity_route(self.n_layers)

    def question_id(self, index: int) -> str:
        return self.task.questions[index].question_id

    def evaluate(self, pairs: Sequence[tuple[int, Route]]) -> list[Evaluation]:
        """The evaluation of each (question index, route) pair, decoding the pairs not seen before."""
        todo: list[tuple[int, Route]] = []
        seen: set[tuple[int, Route]] = set()
        for qi, route in pairs:
            if not 0 <= qi < len(self.prompts):
                raise ReachlensError(f"question index {qi} is out of range for a task of {len(self.prompts)} questions")
            key = (qi, tuple(route))
            if key not in self._memo and key not in seen:
                seen.add(key)
                todo.append(key)
        if todo:
            comps = generate_along_routes(
                self.model, self.prompts, [RouteRequest(qi, r) for qi, r in todo], self.protocol,
                max_batch_rows=self.max_batch_rows,
            )
            for (qi, route), comp in zip(todo, comps):
                self._memo[(qi, route)] = self._grade(qi, route, comp)
            self.n_decoded += len(todo)
        return [self._memo[(qi, tuple(r))] for qi, r in pairs]

    def prefetch(self, routes: Sequence[Route], *, per_call: int = 4,
                 progress: Callable[[int], None] | None = None) -> None:
        """Evaluate every question along every route in ``routes`` (e.g. a whole small space).

        ``per_call`` routes are decoded for all questions in one batched engine call (larger batches than a
        round-by-round search's); later searches then find their pairs memoized.
        Budgets are unaffected: a search is charged for what it proposes, not for what was prefetched.
        """
        routes = list(dict.fromkeys(tuple(r) for r in routes))
        for start in range(0, len(routes), per_call):
            part = routes[start : start + per_call]
            self.evaluate([(qi, r) for r in part for qi in range(len(self.prompts))])
            if progress is not None:
                progress(start + len(part))

    def deployment(self, indices: Sequence[int]) -> list[Evaluation]:
        """The deployment of each question: the full model (the identity route), greedy."""
        return self.evaluate([(qi, self.identity) for qi in indices])

    def _grade(self, qi: int, route: Route, comp: Completion) -> Evaluation:
        g = grade_completion(self._graders[qi], self.task.questions[qi], comp)
        return Evaluation(
            route=route, text=comp.text, **g, finish_reason=comp.finish_reason, n_tokens=len(comp.token_ids),
            mean_logprob=comp.mean_logprob, lowest_window_logprob=lowest_window_mean(comp.logprobs, self.window),
        )
