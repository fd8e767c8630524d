"""Route-search strategies, one per module: random (the control), hill climbing, genetic, MCTS.

Importing this package registers them in :data:`STRATEGIES`.
"""

from reachlens.routing.strategies.base import STRATEGIES, Strategy, make_strategy, register_strategy
from reachlens.routing.strategies.genetic import Genetic
from reachlens.routing.strategies.hill_climb import HillClimb
from reachlens.routing.strategies.mcts import MCTS
from reachlens.routing.strategies.random_search import RandomSearch

__all__ = ["MCTS", "STRATEGIES", "Genetic", "HillClimb", "RandomSearch", "Strategy", "make_strategy",
           "register_strategy"]
