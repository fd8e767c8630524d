"""Layer routing: run a model along any route of its layers, search routes at a matched budget, and
score reachability (O_K) against answer-blind selection.

>>> from reachlens.routing import run_routing
>>> result = run_routing(load_model("zoo:base"), load_task("arith", n=50), "native", "mcts", budget=32)  # doctest: +SKIP
>>> result.summary()["O_K"], result.summary()["majority"]  # doctest: +SKIP

Modules: :mod:`~reachlens.routing.routes` (routes, spaces, validation), :mod:`~reachlens.routing.executor`
(prefix-trie scoring, generation along routes), :mod:`~reachlens.routing.evaluation` (the evaluation
unit), :mod:`~reachlens.routing.search` (the budgeted driver), :mod:`~reachlens.routing.strategies`,
:mod:`~reachlens.routing.scoring` (gap recovery, on the selectors of :mod:`reachlens.selectors`),
:mod:`~reachlens.routing.study` (one cell, stored), :mod:`~reachlens.routing.job` (the cell as a
job of the runner: resumable, on any executor).
"""

from reachlens.routing.evaluation import Evaluation, RouteEvaluator
from reachlens.routing.executor import RouteRequest, RouteTrie, generate_along_routes, route_logits
from reachlens.routing.routes import (
    SPACES,
    NativeSpace,
    ReorderSpace,
    Route,
    RouteSpace,
    SkipSpace,
    format_route,
    identity_route,
    make_space,
    parse_route,
    space_from_spec,
)
from reachlens.routing.scoring import (
    DEFAULT_SELECTORS,
    audit_selector_table,
    cell_summary,
    format_recovery,
    gap_recovery,
    median_recovery,
    question_table,
    reach_curve,
)
from reachlens.routing.search import OBJECTIVES, RoutingConfig, objective_value, run_search
from reachlens.routing.strategies import STRATEGIES, Strategy, make_strategy, register_strategy
from reachlens.routing.job import RoutingJob, run_routing
from reachlens.routing.study import RoutingResult

__all__ = [
    "DEFAULT_SELECTORS",
    "Evaluation",
    "NativeSpace",
    "OBJECTIVES",
    "ReorderSpace",
    "Route",
    "RouteEvaluator",
    "RouteRequest",
    "RouteSpace",
    "RouteTrie",
    "RoutingConfig",
    "RoutingJob",
    "RoutingResult",
    "SPACES",
    "STRATEGIES",
    "SkipSpace",
    "Strategy",
    "audit_selector_table",
    "cell_summary",
    "format_recovery",
    "format_route",
    "gap_recovery",
    "generate_along_routes",
    "identity_route",
    "make_space",
    "make_strategy",
    "median_recovery",
    "objective_value",
    "parse_route",
    "question_table",
    "reach_curve",
    "register_strategy",
    "route_logits",
    "run_routing",
    "run_search",
    "space_from_spec",
]
