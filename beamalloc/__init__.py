"""beamalloc: allocator diagnostics and +M tuning for the Erlang VM."""

#: The package's version: setup.cfg's [metadata] reads it from here (`attr:`), so the installed
#: metadata and `beamalloc --version` agree without importing importlib.metadata at startup.
__version__ = "0.1.0"
