"""Agents by name: a process builds only the agents its operator registered.

A run's row names its agent (``AgentRef``: name, version, JSON parameters), never code. The code that
builds an agent comes from the process's own configuration, in this order:

1. the agents the library ships for serving (none today),
2. Python entry points in the group ``stateward.agents`` (an installed package registers its agents),
3. ``STATEWARD_AGENTS`` / ``--agents``: comma-separated ``module:attr`` of :class:`AgentRegistry` objects.

The agents that exist for tests and fault campaigns (``chaos-ledger``: its params name a store path)
are in none of these: a process builds them only when its operator asks, with ``STATEWARD_TEST_AGENTS=1``
or ``--agents stateward.chaos.agent:registry`` (``stateward chaos`` and ``stateward gates`` ask for
themselves). A name that none of them registered is refused (``AGENT_NOT_REGISTERED``) and nothing is imported.

A new run's agent is made by :meth:`AgentRegistry.create` (``stateward run NAME --param k=v --model
SPEC``): its params must be JSON the factory accepts (``INVALID_AGENT_PARAMS``), and a model spec
becomes the reserved param ``model_spec`` — passed only to a factory that declares it (or takes
``**params`` or one ``params`` dict); any other factory refuses it (``MODEL_NOT_SUPPORTED``). The run
stores exactly those params, so every process rebuilds the same agent.

An agent may declare its params' schema at registration (``params_schema``: a pydantic model); its
params are then validated against it (types, bounds, no unknown key) before the factory is called, and
a refused param is INVALID_AGENT_PARAMS naming it.
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import json
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ValidationError

from stateward.core.entry_points import load_entry_point, load_named
from stateward.core.errors import ErrorCode, RunError, StatewardError, UserError
from stateward.core.state import AgentRef, RunState
from stateward.runtime.agent import Agent
from stateward.runtime.agent_params import MODEL_PARAM, invalid_params, takes_params_dict
from stateward.runtime.agent_version import FINGERPRINT_PREFIX, check_version, fingerprint

ENTRY_POINT_GROUP = "stateward.agents"
ENV_VAR = "STATEWARD_AGENTS"
CAMPAIGN_AGENTS_ENV = "STATEWARD_TEST_AGENTS"  # "1": this process may build the agents made for tests and campaigns
CAMPAIGN_AGENTS_SPEC = "stateward.chaos.agent:registry"

AgentFactory = Callable[..., Agent]
Migration = Callable[[RunState], RunState]
"""Moves a run recorded under an earlier version to this one: takes the run's state and returns it with its
``facts`` and ``memo`` changed as the new version needs (nothing else may change: see runtime/migration.py)."""


@dataclass(frozen=True)
class RegisteredAgent:
    """One name a process may build: its factory, version and where it was registered from.

    ``version`` is the one the operator gave, else (``None``) a fingerprint of the agent's definition
    (:mod:`stateward.runtime.agent_version`), worked out once per process. ``compatible_with`` names the
    earlier versions this build may also drive (runs started under them keep their recorded version).
    """

    name: str
    factory: AgentFactory
    version: str | None = None
    source: str = "code"
    description: str = ""
    compatible_with: tuple[str, ...] = ()
    params_schema: type[BaseModel] | None = None
    migrations: Mapping[str, Migration] = field(default_factory=dict)  # from-version -> its migration to this one
    _resolved: list[str] = field(default_factory=list, compare=False, repr=False)  # the fingerprint, once

    def check(self, params: Mapping[str, Any]) -> None:
        """Validate ``params`` against the declared schema, strictly as JSON (INVALID_AGENT_PARAMS naming
        each refused param)."""
        if self.params_schema is None:
            return
        try:
            # As JSON, strictly: a run's params are JSON, and "100" is no int (a JSON enum value is its member).
            self.params_schema.model_validate_json(json.dumps(dict(params)), strict=True)
        except ValidationError as exc:
            fields = [".".join(str(part) for part in err["loc"]) or "params" for err in exc.errors()]
            why = "; ".join(f"{field}: {err['msg']}" for field, err in zip(fields, exc.errors(), strict=True))
            raise RunError(
                f"agent {self.name!r} does not take these params: {why}"[:1000],
                code=ErrorCode.INVALID_AGENT_PARAMS,
                details={"agent": self.name, "params": sorted(set(fields))[:20]},
            ) from None

    def build(self, params: Mapping[str, Any]) -> Agent:
        """Call the factory with the run's JSON parameters (``factory(**params)``, or ``factory(params)``
        when its one parameter is named ``params``)."""
        if takes_params_dict(self.factory):
            return self.factory(dict(params))
        return self.factory(**params)

    def resolved_version(self, built: Agent | None = None, built_params: Mapping[str, Any] | None = None) -> str:
        """The version runs of this build record: the given one, else the fingerprint of the agent its
        factory builds with its default params (``built`` is used when it was built with none), else of
        the factory's own module source when the factory needs params."""
        if self.version is not None:
            return self.version
        if not self._resolved:
            if built is not None and not built_params:
                self._resolved.append(fingerprint(built))
            else:
                self._resolved.append(_default_fingerprint(self))
        return self._resolved[0]

    def accepted_versions(self) -> tuple[str, ...]:
        """The recorded versions this build may drive: its own and those it declared compatible."""
        own = self.resolved_version()
        return (own, *(v for v in self.compatible_with if v != own))

    def accepts(self, param: str) -> bool:
        """Whether the factory can be given ``param``: by name, through ``**params``, or in its ``params`` dict."""
        try:
            parameters = inspect.signature(self.factory).parameters.values()
        except (TypeError, ValueError):
            return False
        if takes_params_dict(self.factory):
            return True
        by_name = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
        return any(
            p.kind is inspect.Parameter.VAR_KEYWORD or (p.name == param and p.kind in by_name) for p in parameters
        )

    def refusal(self, params: Mapping[str, Any]) -> str | None:
        """Why the factory's signature cannot take ``params`` (unknown or missing ones), or None."""
        if takes_params_dict(self.factory):
            return None
        try:
            inspect.signature(self.factory).bind(**params)
        except TypeError as exc:
            return str(exc)
        except ValueError:
            return None  # no signature to check against: calling the factory decides
        return None


class AgentRegistry:
    """Names an operator lets this process build, each mapped to a factory taking the run's JSON params.

    >>> registry = AgentRegistry()
    >>> @registry.agent("expenses")
    ... def make_expenses(limit: int = 100) -> Agent: ...
    """

    def __init__(self, agents: Iterable[RegisteredAgent] = ()):
        self._agents: dict[str, RegisteredAgent] = {}
        for entry in agents:
            self._add(entry)

    def register(
        self,
        name: str,
        factory: AgentFactory,
        *,
        version: str | None = None,
        description: str = "",
        source: str = "code",
        compatible_with: Iterable[str] = (),
        params_schema: type[BaseModel] | None = None,
        migrations: Mapping[str, Migration] | None = None,
    ) -> None:
        """Let this process build ``name`` with ``factory`` (its params checked against ``params_schema``
        when given). Registering a name twice is a mistake.

        ``version``: what runs started here record (default: a fingerprint of the definition);
        ``compatible_with``: earlier versions whose runs this build may also drive;
        ``migrations``: per earlier version, how a waiting run of it is moved to this version on purpose
        (``stateward runs migrate RUN --to VERSION``; no migration, no move).
        """
        if not name or len(name) > 200:
            raise UserError(f"an agent name must be 1-200 characters, not {name!r}", code=ErrorCode.INVALID_AGENT)
        if not callable(factory):
            raise UserError(f"the factory of agent {name!r} is not callable", code=ErrorCode.INVALID_AGENT)
        compatible = tuple(compatible_with)
        for given in (*(() if version is None else (version,)), *compatible):
            check_version(given)
        if version is not None and version.startswith(FINGERPRINT_PREFIX):
            raise UserError(
                f"version {version!r} of agent {name!r}: the {FINGERPRINT_PREFIX!r} prefix is the fingerprint's",
                code=ErrorCode.INVALID_AGENT_VERSION,
            )
        if params_schema is not None and not (isinstance(params_schema, type) and issubclass(params_schema, BaseModel)):
            raise UserError(
                f"the params_schema of agent {name!r} is not a pydantic model", code=ErrorCode.INVALID_AGENT
            )
        moves = dict(migrations or {})
        for given, move in moves.items():
            check_version(given)
            if not callable(move):
                raise UserError(
                    f"the migration of agent {name!r} from version {given!r} is not callable",
                    code=ErrorCode.INVALID_AGENT,
                )
        self._add(RegisteredAgent(name, factory, version, source, description, compatible, params_schema, moves))

    def register_lazy(
        self,
        name: str,
        target: str,
        *,
        version: str | None = None,
        description: str = "",
        source: str = "code",
        compatible_with: Iterable[str] = (),
    ) -> None:
        """Register the factory at ``target`` (``"module:attr"``) without importing it: the module loads
        when a run of ``name`` is first built or its parameters inspected, so a registry of many agents
        (a package's entry point) costs nothing to list."""
        module, sep, attr = target.partition(":")
        if not sep or not module or not attr:
            raise UserError(f"a lazy factory must be 'module:attr', not {target!r}"[:300], code=ErrorCode.INVALID_AGENT)
        self.register(
            name,
            _LazyFactory(module, attr),
            version=version,
            description=description,
            source=source,
            compatible_with=compatible_with,
        )

    def agent(
        self,
        name: str,
        *,
        version: str | None = None,
        compatible_with: Iterable[str] = (),
        params_schema: type[BaseModel] | None = None,
        migrations: Mapping[str, Migration] | None = None,
    ) -> Callable[[AgentFactory], AgentFactory]:
        """Decorator form of :meth:`register`."""

        def decorate(factory: AgentFactory) -> AgentFactory:
            self.register(
                name,
                factory,
                version=version,
                description=(factory.__doc__ or "").strip(),
                compatible_with=compatible_with,
                params_schema=params_schema,
                migrations=migrations,
            )
            return factory

        return decorate

    def _add(self, entry: RegisteredAgent) -> None:
        known = self._agents.get(entry.name)
        if known is not None and known.factory is not entry.factory:
            raise UserError(
                f"agent {entry.name!r} is registered twice ({known.source} and {entry.source})",
                code=ErrorCode.AGENT_NAME_CONFLICT,
                details={"agent": entry.name, "sources": [known.source, entry.source]},
            )
        self._agents[entry.name] = entry

    def merge(self, other: AgentRegistry) -> None:
        """Add every agent of ``other`` (a name registered by both with different factories is refused)."""
        for entry in other:
            self._add(entry)

    def __iter__(self) -> Iterator[RegisteredAgent]:
        return iter(sorted(self._agents.values(), key=lambda e: e.name))

    def __contains__(self, name: object) -> bool:
        return name in self._agents

    def __len__(self) -> int:
        return len(self._agents)

    def names(self) -> list[str]:
        """The registered agent names, sorted, as `stateward agents list` prints them."""
        return sorted(self._agents)

    def ref(self, name: str, params: Mapping[str, Any] | None = None) -> AgentRef:
        """The reference a run of ``name`` stores (refused if the name is not registered here)."""
        entry = self._entry(name)
        return AgentRef(name=name, version=entry.resolved_version(), params=dict(params or {}))

    def create(self, name: str, params: Mapping[str, Any] | None = None, *, model_spec: str | None = None) -> Agent:
        """A new run's agent: ``name`` built from JSON ``params`` exactly as any process will rebuild it.

        ``model_spec`` joins the params as ``model_spec`` if the factory accepts it (MODEL_NOT_SUPPORTED
        otherwise; INVALID_MODEL_SPEC if it is no spec). Params that are not JSON, that the factory's
        signature does not take, or that make it raise are INVALID_AGENT_PARAMS (a named error the
        factory raises keeps its code). The agent's ``ref`` carries exactly the params it was built with.
        """
        entry = self._entry(name)
        given = dict(params or {})
        if model_spec is not None:
            from stateward.models.config import parse_spec

            parse_spec(model_spec)
            if given.get(MODEL_PARAM, model_spec) != model_spec:
                raise invalid_params(name, f"--model and param {MODEL_PARAM} disagree")
            if not entry.accepts(MODEL_PARAM):
                raise RunError(
                    f"agent {name!r} takes no model (its factory has no {MODEL_PARAM} parameter)",
                    code=ErrorCode.MODEL_NOT_SUPPORTED,
                    details={"agent": name},
                )
            given[MODEL_PARAM] = model_spec
        try:
            # Exactly what the store keeps and a worker reads back (key order kept; NaN refused).
            given = json.loads(json.dumps(given, allow_nan=False, ensure_ascii=False))
        except (TypeError, ValueError) as exc:
            raise invalid_params(name, f"params must be JSON values: {exc}") from None
        entry.check(given)
        why = entry.refusal(given)
        if why is not None:
            raise invalid_params(name, why)
        try:
            agent = entry.build(given)
        except StatewardError:
            raise
        except Exception as exc:
            raise invalid_params(name, f"{type(exc).__name__}: {exc}") from exc
        if not isinstance(agent, Agent):
            raise RunError(
                f"the factory of agent {name!r} returned {type(agent).__name__}, not an Agent",
                code=ErrorCode.AGENT_UNAVAILABLE,
                details={"agent": name},
            )
        agent.ref = AgentRef(name=name, version=entry.resolved_version(agent, given), params=given)
        return agent

    def build(self, ref: AgentRef) -> Agent:
        """Rebuild a run's agent from its stored reference; only registered names are ever built, and only
        under the version the run recorded or one this build declared compatible with it
        (``AGENT_VERSION_UNAVAILABLE`` otherwise: nothing about the run is changed). The agent keeps the
        run's recorded version. A run recorded before versions existed (no version) is built as it is."""
        entry = self._entry(ref.name)
        entry.check(ref.params)  # a stored run's params pass the same schema as a new run's
        if ref.version is not None and (entry.version is not None or entry.compatible_with):
            self._check_version(entry, ref)  # known without building: refuse before the factory runs
        try:
            agent = entry.build(ref.params)
        except Exception as exc:
            raise RunError(
                f"agent {ref.name!r} could not be built: {type(exc).__name__}: {exc}"[:1000],
                code=ErrorCode.AGENT_UNAVAILABLE,
                details={"agent": ref.name},
            ) from exc
        if not isinstance(agent, Agent):
            raise RunError(
                f"the factory of agent {ref.name!r} returned {type(agent).__name__}, not an Agent",
                code=ErrorCode.AGENT_UNAVAILABLE,
                details={"agent": ref.name},
            )
        if ref.version is not None:
            self._check_version(entry, ref, agent)
        agent.ref = ref
        return agent

    def migration(self, ref: AgentRef, to_version: str) -> Migration | None:
        """How a run recorded under ``ref`` moves to ``to_version``, the version this process builds
        (AGENT_VERSION_UNAVAILABLE for any other): the migration that version registered from the run's, or
        None when the run's version is one it declared compatible (nothing to transform).
        AGENT_MIGRATION_NOT_REGISTERED when there is neither, MIGRATION_NOT_NEEDED when the run is already there."""
        entry = self._entry(ref.name)
        own = entry.resolved_version()
        if to_version != own:
            raise RunError(
                f"this process builds agent {ref.name!r} under version {own!r}, not {to_version!r}",
                code=ErrorCode.AGENT_VERSION_UNAVAILABLE,
                details={"agent": ref.name, "asked": to_version, "available": [own]},
            )
        if ref.version == own:
            raise RunError(
                f"the run is already under version {own!r} of agent {ref.name!r}",
                code=ErrorCode.MIGRATION_NOT_NEEDED,
                details={"agent": ref.name, "version": own},
            )
        move = entry.migrations.get(ref.version or "")
        if move is None and ref.version not in entry.compatible_with:
            raise RunError(
                f"version {own!r} of agent {ref.name!r} registers no migration from {ref.version!r}"
                + (f" (it migrates from {', '.join(sorted(entry.migrations))})" if entry.migrations else ""),
                code=ErrorCode.AGENT_MIGRATION_NOT_REGISTERED,
                details={"agent": ref.name, "from": ref.version, "to": own, "migrates_from": sorted(entry.migrations)},
            )
        return move

    def accepted_versions(self, name: str) -> tuple[str, ...]:
        """The recorded versions of ``name``'s runs this process may drive (its own first)."""
        return self._entry(name).accepted_versions()

    def claimable(self) -> dict[str, tuple[str, ...]]:
        """Per registered name, the versions whose runs a worker of this process may claim. A name whose
        version cannot be worked out here (its factory does not import) is left out: its runs are claimed
        and refused at build, as any run of an agent this process cannot build."""
        found: dict[str, tuple[str, ...]] = {}
        for entry in self:
            try:
                found[entry.name] = entry.accepted_versions()
            except StatewardError:
                continue
        return found

    @staticmethod
    def _check_version(entry: RegisteredAgent, ref: AgentRef, built: Agent | None = None) -> None:
        own = entry.resolved_version(built, ref.params if built is not None else None)
        accepted = (own, *entry.compatible_with)
        if ref.version not in accepted:
            raise RunError(
                f"run of agent {ref.name!r} was started under version {ref.version!r}; this process builds "
                f"{own!r}"
                + (f" (compatible with {', '.join(entry.compatible_with)})" if entry.compatible_with else ""),
                code=ErrorCode.AGENT_VERSION_UNAVAILABLE,
                details={"agent": ref.name, "run_version": ref.version, "available": list(accepted)},
            )

    def _entry(self, name: str) -> RegisteredAgent:
        entry = self._agents.get(name)
        if entry is None:
            raise RunError(
                f"agent {name!r} is not registered in this process (see `stateward agents list`)",
                code=ErrorCode.AGENT_NOT_REGISTERED,
                details={"agent": name},
            )
        return entry


def _default_fingerprint(entry: RegisteredAgent) -> str:
    """The fingerprint of the agent the factory builds with no params, or, for a factory that needs
    params, of its module's source (so a changed definition still changes the version)."""
    if entry.refusal({}) is None:
        try:
            agent = entry.build({})
        except Exception:
            agent = None
        if isinstance(agent, Agent):
            return fingerprint(agent)
    return _source_fingerprint(entry.factory)


def _source_fingerprint(factory: AgentFactory) -> str:
    target = factory._target() if isinstance(factory, _LazyFactory) else factory
    module = inspect.getmodule(target)
    try:
        text = inspect.getsource(module) if module is not None else repr(target)
    except (OSError, TypeError):
        text = f"{getattr(target, '__module__', '')}.{getattr(target, '__qualname__', repr(target))}"
    return FINGERPRINT_PREFIX + hashlib.sha256(text.encode()).hexdigest()[:16]


class _LazyFactory:
    """A factory imported when first built (or inspected), so listing agents imports none of them."""

    def __init__(self, module: str, attr: str):
        self._module = module
        self._attr = attr
        self.__name__ = attr

    def _target(self) -> AgentFactory:
        try:
            factory: AgentFactory = getattr(importlib.import_module(self._module), self._attr)
        except (ImportError, AttributeError) as exc:
            raise UserError(
                f"cannot load the agent factory {self._module}:{self._attr}: {type(exc).__name__}: {exc}",
                code=ErrorCode.INVALID_AGENTS_SOURCE,
            ) from exc
        return factory

    def __call__(self, **params: Any) -> Agent:
        return self._target()(**params)

    @property
    def __signature__(self) -> inspect.Signature:
        return inspect.signature(self._target())


def builtin_agents() -> AgentRegistry:
    """The agents the library ships for serving: none. The ledger agent `stateward chaos` drives is a
    test agent (:func:`campaign_agents`); the demos' agents (blog, payment-migration, expenses) come from the
    ``stateward-demos`` package's ``stateward.agents`` entry point, like any installed package's.
    """
    return AgentRegistry()


def campaign_agents() -> AgentRegistry:
    """The agents made for tests and fault campaigns (``chaos-ledger``): registered only on request."""
    return load_spec(CAMPAIGN_AGENTS_SPEC)


def campaign_agents_requested(env: Mapping[str, str]) -> bool:
    """Whether the operator asked for the test agents through ``STATEWARD_TEST_AGENTS``."""
    return env.get(CAMPAIGN_AGENTS_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def load_spec(spec: str) -> AgentRegistry:
    """Import an operator-named ``module:attr`` that must be an AgentRegistry."""
    value = load_named(spec, "agents", ErrorCode.INVALID_AGENTS_SOURCE)
    if not isinstance(value, AgentRegistry):
        raise UserError(
            f"{spec} is a {type(value).__name__}, not an AgentRegistry", code=ErrorCode.INVALID_AGENTS_SOURCE
        )
    return _sourced(value, spec)


def _sourced(registry: AgentRegistry, source: str) -> AgentRegistry:
    return AgentRegistry(
        RegisteredAgent(
            e.name,
            e.factory,
            e.version,
            source if e.source == "code" else e.source,
            e.description,
            e.compatible_with,
            e.params_schema,
            e.migrations,
        )
        for e in registry
    )


def _from_entry_points() -> AgentRegistry:
    """Installed packages register agents: each entry point is an AgentRegistry or one agent's factory."""
    from importlib.metadata import entry_points  # ~50 modules (email, zipfile): not before a run needs an agent

    found = AgentRegistry()
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        source = f"entry point {ep.name} ({ep.value})"
        value = load_entry_point(ep, f"the agents of entry point {ep.name}", ErrorCode.INVALID_AGENTS_SOURCE)
        if isinstance(value, AgentRegistry):
            found.merge(_sourced(value, source))
        elif callable(value):
            found.register(ep.name, value, source=source)
        else:
            raise UserError(f"{source} is neither an AgentRegistry nor a factory", code=ErrorCode.INVALID_AGENTS_SOURCE)
    return found


def split_specs(text: str | None) -> list[str]:
    return [part.strip() for part in (text or "").split(",") if part.strip()]


def process_agents(
    specs: Iterable[str] = (),
    *,
    env: Mapping[str, str] | None = None,
    use_entry_points: bool = True,
    with_test_agents: bool = False,
) -> AgentRegistry:
    """Every agent this process may build: built-ins, entry points, ``STATEWARD_AGENTS`` and ``specs``;
    the test agents too when ``with_test_agents`` or ``STATEWARD_TEST_AGENTS=1``."""
    registry = builtin_agents()
    if use_entry_points:
        registry.merge(_from_entry_points())
    environment = os.environ if env is None else env
    if with_test_agents or campaign_agents_requested(environment):
        registry.merge(campaign_agents())
    for spec in [*split_specs(environment.get(ENV_VAR)), *specs]:
        registry.merge(load_spec(spec))
    return registry
