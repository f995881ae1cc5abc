"""The links between GPUs: a profile's ``interconnect:`` section and the time of a message.

Per GPU and direction: the links' bandwidth, a switch or a mesh of ``peers``, a fixed latency,
the node's size and its network link, and NCCL's measured share of the bandwidth by message
size per collective. With a measured curve a message takes ``bytes / (bandwidth × efficiency)``;
without, ``latency + bytes / bandwidth``. The fields and their sources: docs/context-parallel.md.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..frozen import frozen

TOPOLOGIES = ("switch", "mesh")
#: collectives with a curve of their own (``<kind>_efficiency``)
COLLECTIVES = ("send_recv", "all_to_all", "all_gather")

Curve = tuple[tuple[int, float], ...]


@frozen
class Interconnect:
    """The links between GPUs a profile gives: bandwidth, topology, latency and NCCL's
    measured efficiency per collective (``interconnect:``)."""

    #: what one GPU sends per direction over all its links (bytes/s)
    bandwidth_bytes_per_s: float
    #: fixed cost of one message or group of messages (s)
    latency_s: float = 0.0
    topology: str = "switch"
    #: mesh: GPUs linked directly (the bandwidth is split over them)
    peers: int | None = None
    gpus_per_node: int | None = None
    inter_node_bandwidth_bytes_per_s: float | None = None
    inter_node_latency_s: float | None = None
    send_recv_efficiency: Curve = ()
    all_to_all_efficiency: Curve = ()
    all_gather_efficiency: Curve = ()
    #: SMs NCCL's send/recv kernel holds while it runs beside the compute (measured by
    #: calibrate --gpus; 0: not measured, none taken)
    p2p_sms: int = 0
    #: SMs a kernel dispatched first must leave idle before NCCL's send/recv posted beside it
    #: starts (0: not measured, the transfer waits for the kernel's end)
    p2p_idle_sms: int = 0

    def peer_bandwidth_bytes_per_s(self) -> float:
        """Per direction to one peer: all of it through a switch, a share of it in a mesh."""
        if self.topology == "mesh" and self.peers:
            return self.bandwidth_bytes_per_s / self.peers
        return self.bandwidth_bytes_per_s

    def curve(self, collective: str) -> Curve:
        return getattr(self, f"{collective}_efficiency")

    def efficiency(self, collective: str, message_bytes: float) -> float | None:
        """The measured share of the bandwidth at ``message_bytes`` (linear in log2 of the size
        between measured points, the end point's value outside); None where not measured."""
        curve = self.curve(collective)
        if not curve:
            return None
        xs = np.log2([p[0] for p in curve])
        ys = np.array([p[1] for p in curve])
        return float(np.interp(np.log2(max(float(message_bytes), 1.0)), xs, ys))

    def message_time(self, collective: str, sent_bytes: float, *, message_bytes: float | None = None) -> float:
        """Seconds one GPU needs to send ``sent_bytes`` to one peer in one message (or one
        group); ``message_bytes`` picks the point of the curve (default: ``sent_bytes``)."""
        if sent_bytes <= 0:
            return 0.0
        size = sent_bytes if message_bytes is None else message_bytes
        eff = self.efficiency(collective, size)
        bw = self.peer_bandwidth_bytes_per_s()
        if eff is None:
            return self.latency_s + sent_bytes / bw
        return sent_bytes / (bw * eff)

    def describe(self) -> dict[str, Any]:
        return {
            "bandwidth_bytes_per_s": self.bandwidth_bytes_per_s,
            "peer_bandwidth_bytes_per_s": self.peer_bandwidth_bytes_per_s(),
            "latency_s": self.latency_s,
            "topology": self.topology,
            "peers": self.peers,
            "gpus_per_node": self.gpus_per_node,
            "inter_node_bandwidth_bytes_per_s": self.inter_node_bandwidth_bytes_per_s,
            "inter_node_latency_s": self.inter_node_latency_s,
            **{f"{c}_efficiency": [list(p) for p in self.curve(c)] for c in COLLECTIVES},
        }

    def across_nodes(self) -> Interconnect | None:
        """The link a message between nodes crosses, as an Interconnect of its own (the
        node's curves carried over); None where the profile gives no network figure."""
        if self.inter_node_bandwidth_bytes_per_s is None:
            return None
        return Interconnect(
            bandwidth_bytes_per_s=self.inter_node_bandwidth_bytes_per_s,
            latency_s=self.inter_node_latency_s if self.inter_node_latency_s is not None else self.latency_s,
            topology="switch",
            send_recv_efficiency=(),
            all_to_all_efficiency=(),
            all_gather_efficiency=(),
        )
