"""Use cases, rank 3: publish, deliver, the cycle fire, reconcile, the zone backfill, occupancy,
retention, migrate and the job queue's levels. Each is one thing an operator, a route or a process
asks Notee to do, built from the domain rules (rank 2) and the stores and transport (rank 1); the
processes (rank 4) call them."""
