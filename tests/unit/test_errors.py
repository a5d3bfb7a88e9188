"""Every error the package defines lives in awa_cli.errors and is exported from awa_cli."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

import awa_cli
from awa_cli import errors


def _package_modules() -> list[str]:
    names = ["awa_cli"]
    for info in pkgutil.walk_packages(awa_cli.__path__, "awa_cli."):
        if info.name.endswith("__main__"):
            continue
        names.append(info.name)
    return names


def _error_classes() -> set[type[awa_cli.AwaError]]:
    found: set[type[awa_cli.AwaError]] = set()
    for name in _package_modules():
        module = importlib.import_module(name)
        for _, value in inspect.getmembers(module, inspect.isclass):
            if issubclass(value, awa_cli.AwaError) and value.__module__.startswith("awa_cli"):
                found.add(value)
    return found


def test_every_awa_error_is_defined_in_errors_py() -> None:
    strays = sorted(
        f"{c.__module__}.{c.__qualname__}"
        for c in _error_classes()
        if c.__module__ != "awa_cli.errors"
    )
    assert strays == []


def test_every_awa_error_is_exported_from_the_package() -> None:
    classes = _error_classes()
    assert len(classes) >= 16  # the walk found the package's errors, not an empty set
    missing = sorted(c.__name__ for c in classes if c.__name__ not in awa_cli.__all__)
    assert missing == []
    for cls in classes:
        assert getattr(awa_cli, cls.__name__) is cls


def test_errors_py_lists_every_class_it_defines() -> None:
    defined = {
        name
        for name, value in vars(errors).items()
        if inspect.isclass(value) and value.__module__ == "awa_cli.errors"
    }
    assert defined == set(errors.__all__)


def test_old_import_paths_still_work() -> None:
    from awa_cli.app import RegistrationError
    from awa_cli.config import ConfigError
    from awa_cli.outcomes import InvalidJobState
    from awa_cli.results import AwaError, StagingError, ValidationError

    assert RegistrationError is errors.RegistrationError
    assert ConfigError is errors.ConfigError
    assert InvalidJobState is errors.InvalidJobState
    assert (AwaError, StagingError, ValidationError) == (
        errors.AwaError,
        errors.StagingError,
        errors.ValidationError,
    )


def test_a_tiny_unique_period_is_refused_not_overflowed() -> None:
    # Found by hypothesis (tests/reliability/test_bad_input.py): by_period=5e-324 made the
    # time bucket overflow (OverflowError) instead of a ValidationError naming the field.
    import pytest

    from awa_cli.enqueue import UniqueOpts
    from awa_cli.errors import ValidationError

    for period in (5e-324, 0.0009, 0, -1):
        with pytest.raises(ValidationError, match=r"unique_opts\.by_period"):
            UniqueOpts(by_period=period).period_seconds()
    assert UniqueOpts(by_period=0.001).period_seconds() == 0.001


@pytest.mark.parametrize("limit", [0, -1, True, 2.0, "5", None])
def test_a_listing_limit_must_be_a_positive_integer(limit: object) -> None:
    """The one check behind list_jobs, list_batches, audit_log and the dead-letter listing."""
    from awa_cli.enqueue import positive_limit
    from awa_cli.errors import ValidationError

    with pytest.raises(ValidationError, match="limit: must be a positive integer"):
        positive_limit(limit)
    assert positive_limit(1) == 1 and positive_limit(10_000) == 10_000
