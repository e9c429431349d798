"""The gRPC server: thin grpc.aio servicers over the runtime.

Rules: no protocol logic here. ``convert.py`` is the only place proto messages meet core
dataclasses; ``services.py`` converts, calls the runtime and answers every protocol error
in-band; ``app.py`` wires the server (health, reflection, message size, graceful shutdown)
and is what ``kip848 serve`` runs.
"""
