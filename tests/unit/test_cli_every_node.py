"""``kip848 groups`` finds every node with DescribeCluster (``GroupClient.every_node``): a node
still loading is asked again within ``--timeout``; one that stays unsettled fails the command
with the reason rather than leaving the other nodes' groups out. Without the right to describe
the cluster (or the RPC) the command works on the bootstrap node alone, as documented."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from typing import Any

import grpc
import pytest

from coordinator.cli.errors import CommandFailed
from coordinator.cli.group_client import GroupClient
from kip848.v1 import admin_pb2

NODES = [
    admin_pb2.DescribeClusterResponse.Node(node_id=1, host="127.0.0.1", port=9094),
    admin_pb2.DescribeClusterResponse.Node(node_id=2, host="127.0.0.1", port=9095),
]


class Admin:
    """An AdminService stub answering DescribeCluster with ``answers`` in turn (the last one
    again once they are used up)."""

    def __init__(self, *answers: admin_pb2.DescribeClusterResponse) -> None:
        self.answers: Iterator[admin_pb2.DescribeClusterResponse] = iter(answers)
        self.last = answers[-1]
        self.asked = 0

    def DescribeCluster(self, _request: Any, **_kw: Any) -> admin_pb2.DescribeClusterResponse:
        self.asked += 1
        self.last = next(self.answers, self.last)
        return self.last


def client(admin: Admin, timeout: float) -> GroupClient:
    args = argparse.Namespace(
        bootstrap_server="127.0.0.1:9094", timeout=timeout, command_config=None
    )
    made = GroupClient(args, grpc.insecure_channel("127.0.0.1:9"))
    made.admin = admin
    return made


def loading(code: int = 14) -> admin_pb2.DescribeClusterResponse:
    return admin_pb2.DescribeClusterResponse(error_code=code, error_message="still loading")


def test_a_node_still_loading_is_asked_again() -> None:
    """Before, the first COORDINATOR_LOAD_IN_PROGRESS left the command on this node alone:
    `kip848 groups list` showed its groups only, as if they were all."""
    admin = Admin(loading(), loading(15), admin_pb2.DescribeClusterResponse(nodes=NODES))
    nodes = client(admin, timeout=10).every_node()
    assert [n.address for n in nodes] == ["127.0.0.1:9094", "127.0.0.1:9095"]
    assert admin.asked == 3


def test_a_node_loading_past_the_timeout_fails_the_command(
    capsys: pytest.CaptureFixture[str],
) -> None:
    admin = Admin(loading())
    with pytest.raises(CommandFailed):
        client(admin, timeout=0.3).every_node()
    assert admin.asked >= 2
    assert capsys.readouterr().err.splitlines()[0] == (
        "kip848: describe cluster: COORDINATOR_LOAD_IN_PROGRESS: still loading"
    )


@pytest.mark.parametrize("code", [31, 0])
def test_without_the_cluster_s_nodes_the_bootstrap_node_serves_alone(code: int) -> None:
    """CLUSTER_AUTHORIZATION_FAILED (no DESCRIBE on the cluster), or one node: this one."""
    answer = admin_pb2.DescribeClusterResponse(error_code=code, nodes=[] if code else NODES[:1])
    admin = Admin(answer)
    made = client(admin, timeout=10)
    assert made.every_node() == [made]
    assert admin.asked == 1
