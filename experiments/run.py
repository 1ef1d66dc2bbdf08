"""The one entry point:

    python -m experiments.run method=<m> task=<t> model=<mdl> hardware=<cpu|gpu> [experiment=<paper>/<artifact>] [-m]

Composes the config, skips a run whose identical finished result exists (same config hash, same assets), seeds,
dispatches to the method through the lazy registry and writes one result.json (and, with publish=true on a clean tree,
results/<paper>/runs/<artifact>/<hardware>/<run_id>.json; experiments/identity.py). A failure is recorded as
status=failed; with on_error=record the sweep goes on.
"""
from __future__ import annotations

import logging
import os
import random
import sys
import time
import traceback
from pathlib import Path

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")  # before tokenizers is imported: no fork warnings
# offline unless STRATA_HUB=1: no hub at run time, and no 30-50 s of connection retries before a hub name fails; the
# one switch sets HF_HUB_OFFLINE and HF_DATASETS_OFFLINE together, before transformers/datasets read them
from experiments.hub import online  # noqa: E402

online()

import hydra
import numpy as np
import torch
from hydra.errors import CompactHydraException
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from experiments import REPO, hooks, registry
from experiments.assets import cache_dir
from experiments.config import ON_ERROR, ConfigError, hub_offline, unknown_experiment, validate
from experiments.context import RunContext, pick_device
from experiments.files import write_json
from experiments.identity import published_path, run_name
from experiments.provenance import recording
from experiments.results import SCHEMA_VERSION, config_hash, finished, git_dirty, provenance
from experiments.timing import device_name

log = logging.getLogger("strata")


def quiet_libraries() -> None:
    """Keep a sweep's log readable: our own progress and metrics, not per-split tokenizer bars or load reports
    (BERT's pooler is skipped on purpose: heads read token states)."""
    import datasets
    import transformers
    datasets.disable_progress_bars()
    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def check(cfg: DictConfig, dirty: bool) -> None:
    """Refusals before any work: the schema's ranges and unknown keys, the method's own (Method.check), options the
    method does not apply, and a publish that would not point at committed code."""
    validate(cfg)
    registry.check(cfg)
    method = registry.METHODS.get(cfg.method.name)
    for option in hooks.enabled(cfg):
        if method is not None and option not in method.options:
            takers = sorted(n for n, m in registry.METHODS.items() if option in m.options)
            raise ConfigError(f"{option}.enabled=true but method={cfg.method.name} does not apply the {option} option "
                              f"(methods that do: {', '.join(takers) or 'none'}); drop {option}.enabled or change method")
    if cfg.publish and not cfg.allow_dirty and dirty:
        raise ConfigError("publish=true from a tree with uncommitted changes: a published record must point at the "
                          "code that made it. Commit first, or pass allow_dirty=true (the record then says so).")
    check_length(cfg)


def check_length(cfg: DictConfig) -> None:
    """The run's encoding length (data.max_length, else task.max_length) must fit the model's position table:
    longer inputs fail after the model has loaded, as a tensor size mismatch that names neither."""
    from experiments.models import max_positions
    key = "data.max_length" if cfg.data.max_length else "task.max_length"
    n = int(cfg.data.max_length or cfg.task.max_length)
    limit = max_positions(cfg.model)
    if limit is not None and n > limit:
        raise ConfigError(f"{key}={n} is longer than model={cfg.model.name} reads: it has {limit} positions "
                          f"(max_position_embeddings in its config). Use {key}={limit} or less (longer texts are "
                          "truncated to it)")


def num_threads(requested: int | None) -> int:
    """hardware.threads if set, else $OMP_NUM_THREADS, else the cores this process may use: on a shared 2-core box a
    2-thread pool beside another process runs several times slower than 1 thread."""
    if requested:
        return int(requested)
    env = os.environ.get("OMP_NUM_THREADS", "")
    return int(env) if env.isdigit() and int(env) > 0 else len(os.sched_getaffinity(0))


def offline_hint(cfg: DictConfig, e: Exception) -> str:
    """Runs are offline unless the user says otherwise; a hub model or task that is not in the local HF cache fails
    with the switch named."""
    hub = [f"{g}={cfg[g].name}" for g in ("model", "task") if cfg[g].get("source") == "hub"]
    offline = hub_offline()
    # a ConfigError (experiments.models / data refuse an uncached hub name offline) already names the switch
    if hub and offline and isinstance(e, (OSError, ConnectionError, ValueError)) and not isinstance(e, ConfigError):
        return (f" ({', '.join(hub)} load from the Hugging Face hub, and runs are offline by default: set "
                "STRATA_HUB=1 to allow downloads)")
    return ""


def shown_metrics(metrics: dict) -> str:
    """The eval metrics of a finished (or skipped) run, for its one log line."""
    return "  ".join(f"{k}={v:.4g}" for k, v in metrics.items() if k.startswith("eval/")) or "-"


# the settings a budget file or an experiment most often sets, shown at a run's start
SETTINGS = ("train.lr", "train.epochs", "train.max_steps", "data.limit_train", "data.limit_eval", "task.dev_from_train",
            "hardware.batch_size")


def settings_line(cfg: DictConfig) -> str:
    """What a run inherited before its own overrides: the per-task budget file the defaults list applies
    (conf/budget/<hardware>_<task>.yaml, when this checkout has one) and the values that set a run's scale, so a
    single run can be told from a tier's (which may sweep the lr and choose it on dev)."""
    from hydra.core.hydra_config import HydraConfig
    choice = (HydraConfig.get().runtime.choices.get("budget@_global_") if HydraConfig.initialized()
              else f"{cfg.hardware.name}_{cfg.task.name}")
    budget = Path("conf") / "budget" / f"{choice}.yaml"
    source = f"budget {budget}" if choice and (REPO / budget).exists() else "no budget"
    return f"{source}, then the experiment and overrides: " + " ".join(f"{k}={OmegaConf.select(cfg, k)}"
                                                                        for k in SETTINGS)


def execute(cfg: DictConfig, output_dir: Path, overrides: list[str] | tuple[str, ...] = ()) -> dict:
    """Run (or skip) one composed config; returns its run record. `overrides`: the job's command-line and sweep
    overrides (they name the run and are recorded). Every failure, a refused config included, is recorded, except an
    unknown on_error: it is refused first, before the skip, and writes nothing (it says how to treat a failure, so
    it must neither act as `record`, exiting 0, nor hide behind a finished run whose record it would replace)."""
    if cfg.on_error not in ON_ERROR:
        raise ConfigError(f"on_error={cfg.on_error} is not valid: use one of {', '.join(ON_ERROR)} (raise stops at "
                          "a failure, record writes it and lets a sweep go on)")
    output_dir = Path(output_dir)
    config = OmegaConf.to_container(cfg, resolve=True)
    chash = config_hash(config)
    paper = cfg.paper or registry.paper_of(cfg.method.name)
    run_id = run_name(cfg.run_id, overrides)
    result_path = output_dir / "result.json"
    published = published_path(cfg.results_dir, paper, cfg.exp_id, cfg.hardware.name, run_id)
    # only this machine's own record counts as done: the committed results/ are someone else's run, and a fresh
    # clone's `make reproduce` must recompute them rather than re-render them
    done = None if cfg.force else finished(result_path, chash, registry.version_of(cfg.method.name))
    if done:
        log.info("skip %s: finished with the same config (hash %s) and assets (force=true reruns it): %s\n"
                 "  record: %s", run_id, chash, shown_metrics(done["metrics"]), result_path.resolve())
        if cfg.publish:
            if done["provenance"].get("git_dirty") and not cfg.allow_dirty and not done["provenance"].get("allow_dirty"):
                raise ConfigError(f"publish=true would publish {result_path}, written from a tree with uncommitted "
                                  "changes: rerun it from a clean tree (force=true) or pass allow_dirty=true")
            write_json(published, done)
        return done
    record = {"schema_version": SCHEMA_VERSION, "run_id": run_id, "paper": paper, "exp_id": cfg.exp_id,
              "status": "running", "metrics": {}, "config": config, "config_hash": chash,
              "overrides": list(overrides), "method_version": registry.version_of(cfg.method.name)}
    dirty = git_dirty()
    ctx = RunContext(output_dir=output_dir, device=torch.device("cpu"), device_name="not started")
    start = time.perf_counter()
    error = None
    with recording() as ctx.reads:  # what the method reads, noted where it is read
        try:
            check(cfg, dirty)
            ctx.device = pick_device(cfg.hardware.device)
            torch.set_num_threads(num_threads(cfg.hardware.threads))
            ctx.device_name = device_name(ctx.device)
            fn = registry.resolve(cfg.method.name)
            quiet_libraries()
            seed_everything(cfg.seed)
            ctx.store_dir = Path(cfg.store.dir) if cfg.store.dir else cache_dir() / "activations"
            ctx.store_dtype = cfg.store.dtype
            if cfg.logger.wandb:
                import wandb
                # a sweep in one process starts one wandb run per job: finish the previous one (the old reinit=True)
                ctx.wandb_run = wandb.init(project=cfg.logger.project, mode=cfg.logger.mode, name=run_id,
                                           dir=str(output_dir), config=config, reinit="finish_previous")
            log.info("run %s (hash %s) on %s", run_id, chash, ctx.device_name)
            log.info("settings: %s", settings_line(cfg))
            record["metrics"] = {k: float(v) for k, v in fn(cfg, ctx).items()}
            record["status"] = "ok"
        except Exception as e:  # recorded, then re-raised or swallowed per on_error
            error = e
            record.update(status="failed", error=f"{type(e).__name__}: {e}{offline_hint(cfg, e)}",
                          traceback=traceback.format_exc())
            log.error("run %s failed: %s", run_id, record["error"])  # the record keeps the traceback
            if isinstance(e, ConfigError):
                e.logged = True
        finally:
            if ctx.wandb_run is not None:
                ctx.wandb_run.summary.update({**record["metrics"], "status": record["status"]})
                ctx.wandb_run.finish()
    from experiments.metrics import higher_is_better
    record["higher_is_better"] = {k: higher_is_better(k) for k in record["metrics"]}
    record["n_samples"] = ctx.n_samples
    record["extra"] = ctx.extra
    if ctx.per_example:
        record["per_example"] = ctx.per_example
    record["provenance"] = {**provenance(ctx.device_name, dirty), "allow_dirty": bool(cfg.allow_dirty),
                            "hardware": cfg.hardware.name, "threads": torch.get_num_threads(),
                            "assets": dict(sorted(ctx.reads.assets.items())),
                            "tokenizer": ctx.reads.tokenizer_fingerprint(),
                            "wall_s": round(time.perf_counter() - start, 3)}
    write_json(result_path, record)
    if cfg.publish and record["status"] == "ok":
        write_json(published, record)
    if record["status"] == "ok":
        log.info("done %s in %.1f s: %s\n  record: %s%s", run_id, record["provenance"]["wall_s"],
                 shown_metrics(record["metrics"]), result_path.resolve(),
                 f"\n  published: {published}" if cfg.publish else "")
    if error is not None:
        log.error("  record: %s", result_path.resolve())
    if error is not None and cfg.on_error == "raise":
        raise error
    return record


class Refused(CompactHydraException):
    """A ConfigError in a -m sweep, as Hydra reports a failed job at the sweep's end: its one line, no traceback."""


@hydra.main(config_path="../conf", config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> float | None:
    from hydra.core.hydra_config import HydraConfig
    hc = HydraConfig.get()
    try:
        record = execute(cfg, Path(hc.runtime.output_dir), list(hc.overrides.task))
    except ConfigError as e:
        # a refusal is a user's input, not a bug: its logged line (and the record's path) is the whole story; the
        # record keeps the traceback, and HYDRA_FULL_ERROR=1 prints it
        if not e.logged:  # refused before a record was started (on_error, a publish of a finished run)
            log.error("refused: %s", e)
        if os.environ.get("HYDRA_FULL_ERROR") == "1":
            raise
        if hc.mode == RunMode.MULTIRUN:  # the sweep's other jobs still run; Hydra reports this one at the end
            raise Refused(f"{type(e).__name__}: {e}") from None
        sys.exit(1)
    return record["metrics"].get(cfg.task.objective)  # what a sweeper optimises


if __name__ == "__main__":
    # before Hydra, whose own error for a missing experiment file lists none of those that exist
    if refusal := unknown_experiment(sys.argv[1:]):
        sys.exit(refusal)
    main()
