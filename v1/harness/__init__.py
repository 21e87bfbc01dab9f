"""The `Harness`: runs a taskset's rows through a program, behind the interception endpoint; and the
`EpisodeHarness`, whose program is a control over roles (a policy, a judge, a user), each a harness."""

from v1.harness._episode import Episode, Role
from v1.harness._episode_harness import EpisodeHarness
from v1.harness._harness import Harness

__all__ = ["Episode", "EpisodeHarness", "Harness", "Role"]
