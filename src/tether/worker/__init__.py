"""The worker runtime: claimer, executor, heartbeater, reaper, reconciler, shutdown."""
