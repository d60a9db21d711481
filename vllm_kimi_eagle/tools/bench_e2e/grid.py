"""What ``bench-e2e`` measures: the configurations, the grid of k and concurrency, and the
interleaved order of the windows."""

from __future__ import annotations

from dataclasses import dataclass, field

from vllm_kimi_eagle.tools.engines import vllm_server


NONE, AA, PLUGIN, IN_TREE = "none", "none-aa", "plugin", "in-tree"
NO_SHORTCUT, SCHEDULE_K0, SCHEDULE = "no-shortcut", "schedule-k0", "schedule"
PREFILL_VERIFY = "prefill-verify"
PLUGIN_ENV = {"VLLM_KIMI_EAGLE_DRAFT": "plugin"}
# The k schedule that never drafts: what the mechanism costs by itself (see k_schedule.py).
ALL_K0 = [[1, 1024, 0]]


@dataclass(frozen=True)
class Config:
    """One way of serving the target: what is added to its speculative config and env."""
    description: str
    speculative: bool
    spec_extra: dict = field(default_factory=dict)
    env: dict = field(default_factory=dict)
    drafts: bool | None = None  # whether its windows must propose drafts (default: speculative)

    @property
    def must_draft(self) -> bool:
        return self.speculative if self.drafts is None else self.drafts


CONFIGS = {
    NONE: Config("no speculation", speculative=False),
    AA: Config("no speculation, a second server: the A/A check", speculative=False),
    PLUGIN: Config("the plugin's draft class", True, env=PLUGIN_ENV),
    IN_TREE: Config("vLLM's in-tree draft class", True, env={"VLLM_KIMI_EAGLE_DRAFT": "upstream"}),
    NO_SHORTCUT: Config("the plugin, greedy shortcut off", True,
                        spec_extra={"use_local_argmax_reduction": False}, env=PLUGIN_ENV),
    PREFILL_VERIFY: Config("the plugin, draft tokens verified through the CPU MLA backend's "
                           "prefill path (vLLM's own way on a CPU)", True,
                           env={**PLUGIN_ENV, "VLLM_KIMI_EAGLE_CPU_MLA_VERIFY": "0"}),
    SCHEDULE_K0: Config("the plugin with a k schedule of 0 at every batch size", True,
                        spec_extra={"num_speculative_tokens_per_batch_size": ALL_K0},
                        env=PLUGIN_ENV, drafts=False),
}
# Configurations alive for the whole run, measured in every round.
BASELINES = (NONE, AA)
DEFAULTS = {"k": [1, 2, 3, 4, 5], "concurrency": [1, 4, 16, 32], "repeats": 3,
            "max_tokens": 64, "prompts": 8, "configs": [NONE, AA, PLUGIN, IN_TREE, NO_SHORTCUT],
            "max_servers": None}
# --quick: a small grid for a 2-core machine (tiny models).
QUICK = {"k": [1, 3], "concurrency": [1, 4], "repeats": 3, "max_tokens": 32, "prompts": 4,
         "configs": [NONE, AA, PLUGIN, IN_TREE], "max_servers": 4}
# With the tiny default models (no --target) and no --server-args: eager mode starts in
# about half the time of compiled mode on a CPU.
TINY_SERVER_ARGS = ["--enforce-eager"]
class BenchError(RuntimeError):
    """A measurement that does not measure what it claims to."""


def server_groups(configs: list[str], max_servers: int | None) -> list[list[str]]:
    """The speculative configurations whose servers are alive together for one k.

    The no-speculation servers (BASELINES, when asked for) are alive all the time and
    count in ``max_servers`` (None: no limit, one group)."""
    speculative = [c for c in configs if CONFIGS[c].speculative]
    if not speculative:
        return [[]]
    return groups_of(speculative, max_servers, len([c for c in configs if c in BASELINES]))


def groups_of(names: list[str], max_servers: int | None, alive: int) -> list[list[str]]:
    """``names`` in groups that fit in ``max_servers`` beside ``alive`` servers that stay
    up all the time (None: one group)."""
    size = len(names) if max_servers is None else max_servers - alive
    if size < 1:
        raise BenchError(f"--max-servers {max_servers} leaves no room for a speculative "
                         "server next to the no-speculation one; give 2 or more")
    return [names[i:i + size] for i in range(0, len(names), size)]


def balanced_order(names: list[str], index: int) -> list[str]:
    """The ``index``-th order of ``names`` in a Williams design: over n consecutive
    indices (2n for an odd n) every name takes every position equally often and follows
    every other name equally often. A window measured right after a given server (its
    caches, its memory traffic) is then no more one configuration's luck than another's;
    a plain rotation always measures the same pair back to back."""
    n = len(names)
    if n < 2:
        return list(names)
    first = [0] + [(j + 1) // 2 if j % 2 else n - j // 2 for j in range(1, n)]
    row = [(f + index) % n for f in first]
    if n % 2 and (index // n) % 2:
        row.reverse()
    return [names[i] for i in row]


def window_order(ks: list[int], concurrencies: list[int], repeats: int, configs: list[str],
                 max_servers: int | None = None) -> list[tuple[int, int, int, int, str]]:
    """The measurement order: (k, group, round, concurrency, config). k by k, server
    group by group; within a group, round by round, every concurrency, each of the group's
    configurations and the no-speculation ones once, in the next order of a balanced
    design (balanced_order)."""
    order = []
    for k in ks:
        for g, group in enumerate(server_groups(configs, max_servers)):
            members = [c for c in configs if c in BASELINES or c in group]
            for round_ in range(repeats):
                for i, concurrency in enumerate(concurrencies):
                    for config in balanced_order(members, round_ * len(concurrencies) + i):
                        order.append((k, g, round_, concurrency, config))
    return order


def plugin_problem(configs: list[str], environ) -> str | None:
    """Why the servers would not load the plugin although configurations need it."""
    plugins = environ.get("VLLM_PLUGINS")
    needs = [c for c in configs if CONFIGS[c].speculative]
    if plugins is None or not needs or "kimi_eagle" in [p.strip() for p in plugins.split(",")]:
        return None
    return (f"VLLM_PLUGINS={plugins!r} keeps vLLM from loading this plugin, so configs "
            f"{', '.join(needs)} would all be vLLM without it; unset VLLM_PLUGINS or add "
            "kimi_eagle to it")


def server_config(config: str, draft: str, k: int, extra: dict | None = None) -> dict | None:
    """The --speculative-config of a configuration at k (None: no speculation)."""
    spec = CONFIGS[config]
    if not spec.speculative:
        return None
    return {"method": "eagle3", "model": draft, "num_speculative_tokens": k, **spec.spec_extra,
            **(extra or {})}


def schedule_config(draft: str, schedule: list[list[int]]) -> dict:
    """The --speculative-config that serves a k schedule (num_speculative_tokens: its
    largest k, which vLLM requires to be at least 1: see k_schedule.serving_config)."""
    return {"method": "eagle3", "model": draft,
            "num_speculative_tokens": max(k for _, _, k in schedule),
            "num_speculative_tokens_per_batch_size": schedule}


def settings(args) -> dict:
    """The grid: the user's values, else --quick's, else the defaults."""
    base = QUICK if args.quick else DEFAULTS
    return {name: getattr(args, name) if getattr(args, name) is not None else base[name]
            for name in DEFAULTS}


def running_servers(entries: list[str]) -> dict[tuple[str, int | None], str]:
    """--url CONFIG[:K]=URL entries, as (configuration, k) -> URL: servers already running,
    one per cell of the grid (``none``, and every speculative configuration at every k
    given); a missing cell or an unknown configuration is a ValueError naming it."""
    found: dict[tuple[str, int | None], str] = {}
    for entry in entries:
        cell, sep, url = entry.partition("=")
        config, colon, k_text = cell.partition(":")
        if not sep or not url.startswith(("http://", "https://")) or config not in CONFIGS:
            raise ValueError(f"--url {entry!r}: expected CONFIG[:K]=URL with CONFIG one of "
                             f"{', '.join(CONFIGS)}, e.g. none=http://10.0.0.1:8000 or "
                             "plugin:3=http://10.0.0.2:8000")
        speculative = CONFIGS[config].speculative
        if speculative != bool(colon) or (colon and not k_text.isdigit()):
            raise ValueError(f"--url {entry!r}: {config} "
                             + ("takes the k its server drafts, e.g. plugin:3=URL"
                                if speculative else "drafts nothing: give it without :K"))
        key = (config, int(k_text) if colon else None)
        if key in found:
            raise ValueError(f"--url {cell}: given twice")
        found[key] = url.rstrip("/")
    if (NONE, None) not in found:
        raise ValueError("--url: give the server without speculation too (none=URL): every "
                         "speedup is over it")
    ks = sorted({k for _, k in found if k is not None})
    configs = sorted({c for c, k in found if k is not None})
    missing = [f"{c}:{k}" for c in configs for k in ks if (c, k) not in found]
    if not ks or missing:
        raise ValueError("--url: every speculative configuration needs a server at every k "
                         f"measured (k {ks}); missing: {', '.join(missing) or 'any'}")
    return found


def bench_server_args(user: list[str], tiny_default: bool) -> list[str]:
    """The servers' arguments: the user's, the eval's visible defaults for flags they do
    not give (--seed 0), and eager mode for the tiny models when the user gave none."""
    return vllm_server.server_args(user or (TINY_SERVER_ARGS if tiny_default else []))
