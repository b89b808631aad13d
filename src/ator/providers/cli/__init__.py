"""Agent CLIs (`claude`, `codex`) driven as providers (layer: providers).

`process` supervises one CLI run (its own process group, stdin written then closed, lines
read under a size cap, SIGTERM then SIGKILL of the whole group); `jail` builds where and
with what it runs (the org's workspace as cwd, a stripped environment, a vanilla settings
overlay); `claude` and `codex` parse each CLI's JSON lines into provider events; `runtime`
is the provider that ties them together; `resolve` finds an installed CLI and its state;
`factories` registers `claude_cli` and `codex_cli` behind the provider seam.
"""
