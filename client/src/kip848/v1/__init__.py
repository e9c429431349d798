"""Version 1 of the wire contract: package ``kip848.v1``.

Modules: ``common_pb2`` (shared messages, ErrorCode), ``consumer_group_pb2[_grpc]``
(ConsumerGroupService), ``classic_group_pb2[_grpc]`` (ClassicGroupService),
``offsets_pb2[_grpc]`` (OffsetService), ``admin_pb2[_grpc]`` (AdminService),
``testing_pb2[_grpc]`` (TestingService). All generated; see docs/proto.md.

Protocol errors travel in-band as ``error_code`` (Kafka's numbers) plus
``error_message``; absent ``optional`` fields mean Kafka's null.
"""
