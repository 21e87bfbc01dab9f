"""Cross-cutting helpers private to v1: calling user code, entropy, GC tuning, process lifelines,
provenance, single-flight, loop scopes, the open-file limit, bounded JSON, byte tails, message text, loopback URLs, sandbox paths,
token budget names and logging."""
