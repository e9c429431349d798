"""Deterministic simulation and exhaustive small-scope checking of the pure core (KIP-848
"Test Plan": discrete event simulation with invariants checked after every step).

Rules
* Pure like the core: no IO, no wall clock, no global ``random`` state — every run draws from
  one ``random.Random(seed)``, so a seed reproduces its event trace exactly.
* KIP-848 clients (:mod:`.client`) are ``kip848.client``'s own sans-IO member on virtual time,
  so the simulations check what users run; they only react to what they receive; invariants
  (:mod:`.invariants`) judge ownership from the members' point of view.

Reading order: ``client`` and ``classic_client`` → ``invariants`` → ``simulator`` (parameters,
event queue, network, I4 replay, I5 liveness) → ``faults`` (fault names and the client and
cluster faults it injects) → ``report`` (the summary, the failure report, trace texts) →
``explore`` (breadth-first search over interleavings). ``kip848 simulate``'s command line is
the CLI's (``coordinator/cli/simulation.py``). See docs/simulation.md.
"""
