"""beamalloc: allocator diagnostics and +M tuning for the Erlang VM."""
