"""The endpoint's one route table: every path it answers, used by both carriers.

The aiohttp server hands every request to `RouteTable.dispatch`, and so does the
in-process transport, so the two cannot disagree on what a path means. Paths lie
under a rollout's ``/r/<rollout id>``; a route's ``{field}`` segments become
keyword values for its handler.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field

from v1.interception._dialect import route_pattern
from v1.interception._exchange import Answer, Exchange

RouteHandler = Callable[[str, Exchange, Mapping[str, str]], Awaitable[Answer | None]]
"""`handle(rollout id, exchange, route fields)` -> the answer, or None once it streamed."""

Found = tuple["Route", str, dict[str, str]]
"""A path's route, rollout id and route field values (`RouteTable.find`)."""

_UNDER_ROLLOUT = re.compile(r"/r/([^{}/]+)(/.*)")


@dataclass(frozen=True)
class Route:
    """One path of the endpoint under ``/r/<rollout id>``.

    Args:
        path: the path after the rollout's root, ``{field}`` segments allowed (``/v1beta/models/{model}:{method}``).
        handle: answers a request on the path; it checks the method, the key and the body itself.
    """

    path: str
    handle: RouteHandler
    pattern: re.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "pattern", route_pattern(self.path))


class RouteTable:
    """Routes looked up by path: a path without fields by equality, then patterns in table order."""

    def __init__(self, routes: Sequence[Route], unknown: Callable[[Exchange], Awaitable[Answer]]) -> None:
        self.routes = tuple(routes)
        self._unknown = unknown
        self._exact = {route.path: route for route in reversed(self.routes) if "{" not in route.path}
        self._patterned = [route for route in self.routes if "{" in route.path]

    def find(self, path: str) -> Found | None:
        """The route a request path takes, the rollout id and the route's field values; None for an unknown path."""
        under = _UNDER_ROLLOUT.fullmatch(path)
        if under is None:
            return None
        rollout, rest = under[1], under[2]
        route = self._exact.get(rest)
        if route is not None:
            return route, rollout, {}
        for route in self._patterned:
            fields = route.pattern.fullmatch(rest)
            if fields is not None:
                return route, rollout, fields.groupdict()
        return None

    async def dispatch(self, exchange: Exchange, found: Found | None) -> Answer | None:
        """Answer one request, whichever carrier brought it, on the route `find` gave for its path; None once the handler streamed."""
        if found is None:
            return await self._unknown(exchange)
        route, rollout, fields = found
        return await route.handle(rollout, exchange, fields)


__all__ = ["Found", "Route", "RouteHandler", "RouteTable"]
