"""`SandboxScopes`: a scope's end deletes that scope's sandboxes, and only those, with real local sandboxes."""

from __future__ import annotations

import v1 as vf
from v1.sandbox import list_sandboxes
from v1.sandbox._scopes import SandboxScopes


def live_ids() -> set[str]:
    return {record.sandbox_id for record in list_sandboxes()}


async def test_ending_one_scope_deletes_its_sandboxes_and_leaves_every_other_scopes() -> None:
    scopes = SandboxScopes()
    per_rollout, per_group = vf.SandboxConfig(), vf.SandboxConfig(scope="group")
    first = await scopes.get(per_rollout, "rollout:a", None, ["rollout:a"])
    second = await scopes.get(per_rollout, "rollout:b", None, ["rollout:b"])
    shared = await scopes.get(per_group, "group:g", None, ["rollout:a"])
    assert await scopes.get(per_rollout, "rollout:a", None, ["rollout:a"]) is first  # one sandbox a scope and config
    assert await scopes.get(per_group, "group:g", None, ["rollout:b"]) is shared
    try:
        assert await scopes.close("rollout:a") == []
        assert first.id not in live_ids() and {second.id, shared.id} <= live_ids()
        assert (await second.exec(["true"])).exit_code == 0 and (await shared.exec(["true"])).exit_code == 0
        assert await scopes.close("rollout:a") == []  # a scope already ended has nothing left to delete
        assert {second.id, shared.id} <= live_ids()
        fresh = await scopes.get(per_rollout, "rollout:a", None, ["rollout:a"])  # a scope key used again starts anew
        assert fresh is not first and fresh.id in live_ids()
    finally:
        for scope in ("rollout:a", "rollout:b", "group:g"):
            await scopes.close(scope)
    assert not {first.id, second.id, shared.id} & live_ids()
