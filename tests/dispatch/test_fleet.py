"""The fleet index: owners, custom and private domains, adoption, virtual owners."""

from __future__ import annotations

import pytest

from registry.dispatch.catalogue import Catalogue
from registry.dispatch.errors import InvalidFleetError
from registry.dispatch.fleet import VIRTUAL_PREFIX, build_fleet, routing_signature
from registry.dispatch.records import Specialist
from tests.dispatch.conftest import SEED_FLEET


def test_seed_fleet_owners(catalogue: Catalogue) -> None:
    fleet = build_fleet(catalogue, SEED_FLEET)
    devops = fleet.owner_of("devops-lora")
    assert set(devops.domains) >= {"docker", "k8s", "ci/cd", "shell"}
    assert devops.domains["docker"] == 1.0
    # Terraform, cloud and server tasks go to devops (seed: "Infrastructure"), at an affinity.
    assert 0 < devops.domains["terraform"] < 1
    assert 0 < devops.domains["servers"] < 1
    # Topics no specialist serves get virtual owners: a Go question must not go anywhere.
    assert fleet.owner_of(VIRTUAL_PREFIX + "go").specialist is None
    assert fleet.owner_of(VIRTUAL_PREFIX + "networking").specialist is None
    assert not any(o.key == VIRTUAL_PREFIX + "terraform" for o in fleet.owners)
    assert not any(o.key == VIRTUAL_PREFIX + "general" for o in fleet.owners)


def test_unknown_domain_and_private_keywords(catalogue: Catalogue) -> None:
    spec = Specialist(
        "quantum-lora",
        ("Quantum Computing",),
        keywords=("qiskit", "*.qasm"),
        exemplars=("simulate a circuit with two qubits",),
    )
    fleet = build_fleet(catalogue, [spec])
    owner = fleet.owner_of("quantum-lora")
    assert set(owner.domains) == {"quantum computing", "@quantum-lora"}
    assert ("quantum computing", "quantum computing") in fleet.exemplar_rows
    assert ("@quantum-lora", "simulate a circuit with two qubits") in fleet.exemplar_rows
    private = fleet.domains["@quantum-lora"]
    assert [t.text for t in private.terms] == ["qiskit"]
    assert [r.text for r in private.files] == [".qasm"]


def test_duplicate_or_empty_names_are_refused(catalogue: Catalogue) -> None:
    with pytest.raises(InvalidFleetError):
        build_fleet(catalogue, [Specialist("a", ("python",)), Specialist("a", ("sql",))])
    with pytest.raises(InvalidFleetError):
        build_fleet(catalogue, [Specialist(" ", ("python",))])


def test_a_specialist_with_nothing_to_route_on_is_skipped(catalogue: Catalogue) -> None:
    fleet = build_fleet(catalogue, [Specialist("empty", ()), Specialist("py", ("python",))])
    assert [s.name for s in fleet.specialists] == ["py"]


def test_statistics_do_not_change_the_signature(catalogue: Catalogue) -> None:
    before = [Specialist("py", ("python",))]
    after = [Specialist("py", ("python",), success_rate=0.9, request_count=10)]
    assert routing_signature(before) == routing_signature(after)
    fleet = build_fleet(catalogue, before).with_statistics(after)
    owner = fleet.owner_of("py")
    assert owner.specialist is not None
    assert owner.specialist.request_count == 10
