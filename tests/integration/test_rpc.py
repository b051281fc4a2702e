"""Agent methods clients call over the WebSocket (docs/protocol.md#rpc-frames), and the built-in approvals."""

from typing import Any

import pytest
from channels.db import database_sync_to_async
from django.contrib.auth.models import Permission

from tests.action_agents import ActionTestAgent
from tests.conftest import connect
from tests.support.frames import open_agent, receive_until

pytestmark = pytest.mark.django_db(transaction=True)


async def call(socket: Any, call_id: str, method: str, *args: Any) -> dict[str, Any]:
    """The answer to one call (frames the instance broadcasts meanwhile are passed over)."""
    await socket.send_json_to({"type": "rpc", "id": call_id, "method": method, "args": list(args)})
    frames = await receive_until(socket, lambda f: f.get("type") == "rpc" and f.get("id") == call_id)
    return frames[-1]


@pytest.mark.parametrize(("method", "args", "answer"), [
    ("add", [2, 3], {"done": True, "id": "c1", "result": 5, "success": True, "type": "rpc"}),
    ("messages_stored", [], {"done": True, "id": "c1", "result": 0, "success": True, "type": "rpc"}),
    ("fail", [], {"error": "no such order", "id": "c1", "success": False, "type": "rpc"}),
    ("internal", [], {"error": "Method internal is not callable", "id": "c1", "success": False, "type": "rpc"}),
    ("_secret", [], {"error": "Method _secret does not exist", "id": "c1", "success": False, "type": "rpc"}),
    ("nothing", [], {"error": "Method nothing does not exist", "id": "c1", "success": False, "type": "rpc"}),
], ids=["sync", "async", "raises", "not-callable", "private", "unknown"])
async def test_callable_methods_answer_and_others_are_refused(ws, method, args, answer):
    a = await open_agent(ws, "/agents/rpc-agent/calls")
    assert await call(a, "c1", method, *args) == answer


async def test_wrong_arguments_are_an_error_answer_not_a_crash(ws):
    a = await open_agent(ws, "/agents/rpc-agent/args")
    answer = await call(a, "c2", "add", 1)
    assert answer["success"] is False and answer["error"].startswith("Method add: ")
    assert (await call(a, "c3", "add", 1, 1))["result"] == 2


async def park(user: Any) -> tuple[Any, str]:
    handle = await ActionTestAgent.aget("rpc-approvals", owner=user)
    await handle.save_messages(['/tool pauseAction {"message": "deploy"}'])
    [pending] = await handle.pending_approvals()
    return handle, pending["executionId"]


async def test_approvals_are_callable_by_users_who_may_approve(make_user):
    def staff_approver() -> Any:
        approver = make_user("approver", is_staff=True)
        approver.user_permissions.add(Permission.objects.get(codename="approve_action"))
        return approver

    approver = await database_sync_to_async(staff_approver)()
    handle, execution_id = await park(approver)
    socket, connected, _ = await connect("/agents/action-test-agent/rpc-approvals", approver)
    assert connected
    await socket.receive_json_from()
    await socket.receive_json_from()
    listed = await call(socket, "c1", "pendingApprovals")
    assert [p["executionId"] for p in listed["result"]] == [execution_id]
    decided = await call(socket, "c2", "approveExecution", execution_id)
    assert decided == {"done": True, "id": "c2", "result": "paused-exec: deploy", "success": True, "type": "rpc"}
    again = await call(socket, "c3", "rejectExecution", execution_id, "too late")
    assert again["result"]["status"] == "error"  # no longer pending: an answer, never a second run
    assert await handle.pending_approvals() == []
    await socket.disconnect()


async def test_approvals_are_not_callable_by_other_users(ws, user):
    handle, execution_id = await park(user)
    a = await open_agent(ws, "/agents/action-test-agent/rpc-approvals")
    for call_id, method in enumerate(("pendingApprovals", "approveExecution", "reject_execution")):
        answer = await call(a, str(call_id), method, execution_id)
        assert answer == {"error": f"Method {method} is not callable", "id": str(call_id), "success": False,
                          "type": "rpc"}
    assert [p["executionId"] for p in await handle.pending_approvals()] == [execution_id]
