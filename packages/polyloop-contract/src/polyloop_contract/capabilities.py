"""Optional capabilities a store declares, so that what the kit cannot check is said out loud.

A capability is on unless the downstream project declares it off, with the reason, in its
``polyloop_store_capabilities`` fixture. Rules that need a capability which is off are skipped
with that reason, and the end-of-run report lists every capability declared off.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

__all__ = ["STORE_CAPABILITIES", "StoreCapabilities"]

#: Every optional store capability, with the sentence saying what "on" promises.
STORE_CAPABILITIES: Mapping[str, str] = MappingProxyType(
    {
        "reopen": (
            "a new store object opened on the same storage sees every write the old one "
            "acknowledged (needed by the durability rules; provide polyloop_store_reopen)"
        ),
        "exotic_run_ids": (
            "any Python string is a valid run_id, including NUL characters, 10 000 characters, "
            "and the same text in two Unicode normalisations"
        ),
        "credentials": (
            "the store is given credentials (a password, a token) that its storage can refuse; "
            "provide polyloop_store_refused, and the kit checks that nothing the store then "
            "raises carries them: not the message, the exception chain, the exceptions' "
            "attributes, nor the local variables of their tracebacks"
        ),
        "leases": (
            "the store implements polyloop.ports.RunLeasing: at most one holder of a run's lease "
            "across every store object on the same storage, freed when the holder dies (a "
            "store that does not implement it is reported, not failed)"
        ),
        "user_asking": (
            "the store implements polyloop.ports.UserAsking: it holds the UserAsked and "
            "UserAnswered records of runs that wait for a person, at most one of each per step "
            "(a store that does not implement it is reported, not failed; gated runs are "
            "refused on it)"
        ),
        "record_batching": (
            "the store implements polyloop.ports.RecordBatching: several records of one run "
            "in one write, read back exactly as written one by one, stored all or none when "
            "one is refused, a prefix of them when cut short (a store that does not implement "
            "it is reported, not failed; the loop then writes each record on its own)"
        ),
    }
)


@dataclass(frozen=True)
class StoreCapabilities:
    """The optional capabilities a store does not have, each with the reason.

    ``StoreCapabilities()`` claims every capability;
    ``StoreCapabilities(off={"reopen": "storage lives in the object"})`` declares one off.
    """

    off: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        copy: dict[str, str] = {}
        for name, reason in dict(self.off).items():
            if name not in STORE_CAPABILITIES:
                known = ", ".join(sorted(STORE_CAPABILITIES))
                raise ValueError(
                    f"StoreCapabilities: unknown capability {name!r}; the known ones are {known}."
                )
            if not isinstance(reason, str) or not reason.strip():
                raise ValueError(
                    f"StoreCapabilities: capability {name!r} is declared off without a reason; "
                    "say in a sentence why your store cannot do it (the report prints it)."
                )
            copy[name] = reason
        object.__setattr__(self, "off", MappingProxyType(copy))

    def has(self, name: str) -> bool:
        """Whether capability ``name`` is on."""
        if name not in STORE_CAPABILITIES:
            raise ValueError(f"unknown store capability {name!r}")
        return name not in self.off
