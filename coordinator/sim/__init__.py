"""Deterministic simulation and exhaustive small-scope checking of the pure core (KIP-848
"Test Plan": discrete event simulation with invariants checked after every step).

Rules
* Pure like the core: no IO, no wall clock, no global ``random`` state — every run draws from
  one ``random.Random(seed)``, so a seed reproduces its event trace exactly.
* Clients (:mod:`.client`) behave like real KIP-848 consumers and only react to what they
  receive; invariants (:mod:`.invariants`) judge ownership from the members' point of view.

Reading order: ``client`` → ``invariants`` → ``simulator`` (event queue, faults, I4 replay, I5
liveness) → ``explore`` (breadth-first search over interleavings) → ``cli``
(``kip848 simulate``). See docs/simulation.md.
"""
