"""Run a model along many routes: a prefix trie for scoring, grouped generation for answers.

**Scoring** (:func:`route_logits`: the logits along each route). Routes that share a prefix share the hidden
state after it: ``0,1,2,3`` and ``0,1,2,2,3`` both run ``embed -> 0 -> 1 -> 2`` on the same input.
The routes are put in a trie (:class:`RouteTrie`, one node per distinct prefix) and the trie is run
breadth first: at each depth the nodes are grouped by the layer they run, and each group is *one*
call of :meth:`LayerStack.run_layers <reachlens.engine.stack.LayerStack.run_layers>` on the stacked
parent states, with the arguments the family's own forward gives that layer (its mask type, its
rotary table; :meth:`LayerStack.prepare <reachlens.engine.stack.LayerStack.prepare>`). A layer
therefore runs once per trie node instead of once per route, and each depth
costs one call per distinct layer instead of one per route. Duplicate routes share their leaf.

**Generation** (:func:`generate_along_routes`). Candidate answers need decoding along each route.
Every request is a row of *one* :func:`~reachlens.engine.generate` call carrying its route
(:attr:`Row.route <reachlens.engine.Row.route>`): at each route step the engine runs each layer once, on
the rows whose route runs it (:class:`~reachlens.engine.stack.RowRoutes`), with a route-aware KV cache
(one slot per route step, so a repeated layer has its own keys). A random search's requests, one
question per route, thus decode together instead of one small call per route. (A family with
sliding-window layers decodes one route per call: a cache slot cannot mix windows.)

Hooks: everything runs through the bridge's own blocks, so TransformerLens hooks fire, named by the
layer that runs. In the trie a hook on ``blocks.2.hook_mlp_out`` fires once per trie node that runs
layer 2, on the stacked rows of the routes that share it (its batch dimension is ``nodes * batch``).

Numerics: a trie node's rows go through the same ops as a one-route forward, only stacked with other
rows; logits agree with :meth:`LayerStack.forward` per route to float32 rounding (about 1e-6).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from jaxtyping import Float, Int
from torch import Tensor

from reachlens.engine import Completion, LayerStack, Row, generate
from reachlens.errors import ReachlensError
from reachlens.protocol import Protocol
from reachlens.routing.routes import Route

__all__ = ["RouteTrie", "RouteRequest", "route_logits", "generate_along_routes"]


@dataclass(frozen=True)
class RouteTrie:
    """The prefix trie of a list of routes. Node 0 is the root (the embedding, no layer run).

    >>> trie = RouteTrie.build([(0, 1, 2), (0, 1, 1, 2), (0, 2), (0, 1, 2)])
    >>> trie.n_layer_calls, trie.naive_layer_calls
    (6, 12)
    """

    parent: tuple[int, ...]
    """Parent node of each node (-1 for the root)."""
    layer: tuple[int, ...]
    """Layer each node runs (-1 for the root)."""
    depth: tuple[int, ...]
    """Route step of each node, 1-based (0 for the root)."""
    leaf: tuple[int, ...]
    """Node where each route ends, aligned with the routes given to :meth:`build`."""
    naive_layer_calls: int
    """Sum of the route lengths: what one forward per route runs."""

    @classmethod
    def build(cls, routes: Sequence[Route]) -> RouteTrie:
        parent, layer, depth = [-1], [-1], [0]
        children: dict[tuple[int, int], int] = {}
        leaf = []
        for route in routes:
            node = 0
            for step in route:
                key = (node, int(step))
                if key not in children:
                    children[key] = len(parent)
                    parent.append(node)
                    layer.append(int(step))
                    depth.append(depth[node] + 1)
                node = children[key]
            leaf.append(node)
        return cls(tuple(parent), tuple(layer), tuple(depth), tuple(leaf), sum(len(r) for r in routes))

    @property
    def n_layer_calls(self) -> int:
        """Layer computations the trie runs: one per node except the root."""
        return len(self.parent) - 1

    @property
    def saved(self) -> float:
        """Fraction of the naive layer computations the trie does not run."""
        return 1.0 - self.n_layer_calls / self.naive_layer_calls if self.naive_layer_calls else 0.0

    def levels(self) -> list[dict[int, list[int]]]:
        """Per depth 1, 2, ...: the nodes at that depth grouped by the layer they run."""
        out: list[dict[int, list[int]]] = []
        for node in range(1, len(self.parent)):
            d = self.depth[node]
            while len(out) < d:
                out.append(defaultdict(list))
            out[d - 1][self.layer[node]].append(node)
        return [dict(sorted(level.items())) for level in out]

    @property
    def n_group_calls(self) -> int:
        """Batched block calls the trie needs: one per (depth, layer) pair."""
        return sum(len(level) for level in self.levels())


@torch.inference_mode()
def route_logits(
    model,
    input_ids: Int[Tensor, "batch pos"],
    routes: Sequence[Sequence[int]],
    *,
    last_only: bool = True,
    fused: bool = True,
) -> Float[Tensor, "route batch out_pos vocab"]:
    """Logits of ``input_ids`` along each route, computed once per trie node.

    Args:
        model: a TransformerBridge (see :func:`reachlens.load_model`).
        input_ids: unpadded token ids; every row runs every route.
        routes: layer routes (validated against the model's depth); duplicates are free.
        last_only: unembed only the last position (the next-token distribution).
        fused: take the fused path where it applies (False: the generic path; see :func:`reachlens.engine.describe`).

    Returns:
        ``[len(routes), batch, 1 or pos, vocab]``; entry ``r`` equals
        ``LayerStack(model).forward(input_ids, route=routes[r])`` to float32 rounding.

    >>> logits = route_logits(model, ids, [(0, 1, 2), (0, 2), (0, 1, 1, 2)])  # doctest: +SKIP
    """
    stack = LayerStack(model, fused=fused)
    steps = [stack.route(r) for r in routes]
    if not steps:
        raise ReachlensError("route_logits needs at least one route")
    trie = RouteTrie.build(steps)
    b = input_ids.shape[0]
    # how many children still need each node's state (freed as soon as none does)
    pending = [0] * len(trie.parent)
    for node in range(1, len(trie.parent)):
        pending[trie.parent[node]] += 1
    leaves = set(trie.leaf)
    states: dict[int, Tensor] = {}
    with stack.kernels():
        inputs = stack.prepare(input_ids)
        stacked = {1: inputs}
        states[0] = inputs.resid
        for level in trie.levels():
            for layer, nodes in level.items():
                resid = torch.cat([states[trie.parent[n]] for n in nodes]) if len(nodes) > 1 else states[
                    trie.parent[nodes[0]]]
                if len(nodes) not in stacked:
                    stacked[len(nodes)] = inputs.stacked(len(nodes))
                out = stack.run_layers(stacked[len(nodes)], (layer,), resid=resid)
                for i, n in enumerate(nodes):
                    states[n] = out[i * b : (i + 1) * b]
                for n in nodes:
                    p = trie.parent[n]
                    pending[p] -= 1
                    if pending[p] == 0 and p not in leaves:
                        del states[p]
    unique = sorted(set(trie.leaf))
    final = torch.stack([states[n] for n in unique])  # [leaves, batch, pos, d]
    if last_only:
        final = final[:, :, -1:]
    logits = stack.unembed(final.flatten(0, 1)).unflatten(0, (len(unique), b))
    where = {n: i for i, n in enumerate(unique)}
    return logits.index_select(0, torch.tensor([where[n] for n in trie.leaf], device=logits.device))


@dataclass(frozen=True)
class RouteRequest:
    """One completion to generate: which prompt, along which route, with which sampling seed."""

    prompt: int
    """Index into the prompts given with the request."""
    route: Route
    """Layer route to decode along."""
    seed: int | None = None
    """None: greedy; an integer: one temperature sample (see :mod:`reachlens.engine.rng`)."""


def generate_along_routes(
    model,
    prompts: Sequence[str],
    requests: Sequence[RouteRequest],
    protocol: Protocol,
    *,
    stop_at_eos: bool = True,
    max_batch_rows: int = 256,
    fused: bool = True,
) -> list[Completion]:
    """One completion per request, all requests in one engine call (each row along its own route).

    Identical requests are decoded once and their completion is shared.

    >>> reqs = [RouteRequest(0, (0, 1, 1, 2)), RouteRequest(1, (0, 2), seed=7)]
    >>> outs = generate_along_routes(model, prompts, reqs, Protocol.greedy("arith", max_new_tokens=32))  # doctest: +SKIP
    """
    wanted: dict[tuple[int, Route, int | None], list[int]] = {}
    for i, req in enumerate(requests):
        if not 0 <= req.prompt < len(prompts):
            raise ReachlensError(f"requests[{i}].prompt={req.prompt} but there are {len(prompts)} prompts")
        wanted.setdefault((req.prompt, tuple(req.route), req.seed), []).append(i)
    if not wanted:
        return []
    keys = list(wanted)
    used = sorted({p for p, _, _ in keys})
    local = {p: j for j, p in enumerate(used)}
    rows = [Row(local[p], seed, route=route) for p, route, seed in keys]
    comps = generate(model, [prompts[p] for p in used], rows, protocol, stop_at_eos=stop_at_eos,
                     max_batch_rows=max_batch_rows, fused=fused)
    out: list[Completion | None] = [None] * len(requests)
    for key, comp in zip(keys, comps):
        for i in wanted[key]:
            out[i] = comp
    return [c for c in out if c is not None]
