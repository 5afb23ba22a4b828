"""The parameter-name glossary, enforced across the public API.

One concept, one name: ``sigma`` (standard deviation), ``sigma2`` (variance
parameter of a discrete Gaussian), ``noise_multiplier`` (σ/Δ of DP-SGD),
``sample_rate`` (a sampling probability), ``epsilon``, ``delta``, ``rho``, ``mu``,
``sensitivity`` and ``rng`` (keyword-only everywhere). Compound names built on
them (``target_epsilon``, ``l2_sensitivity``, ``extra_delta``) are fine; the
synonyms below are not.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from collections.abc import Callable, Iterator
from types import ModuleType

import pytest

MODULES = (
    "gaussdp",
    "gaussdp.accounting",
    "gaussdp.privacy",
    "gaussdp.release",
    "gaussdp.ml",
    "gaussdp.sampling",
    "gaussdp.random",
    "gaussdp.audit",
    "gaussdp.synth",
    "gaussdp.plot",
)

#: Names seen in other libraries for the glossary's concepts, and the name to use.
SYNONYMS = {
    "eps": "epsilon",
    "epsilon_": "epsilon",
    "target_eps": "target_epsilon",
    "del_": "delta",
    "target_del": "target_delta",
    "rate": "sample_rate",
    "sampling_rate": "sample_rate",
    "sampling_probability": "sample_rate",
    "sample_prob": "sample_rate",
    "sample_probability": "sample_rate",
    "subsampling_rate": "sample_rate",
    "noise_scale": "noise_multiplier",
    "multiplier": "noise_multiplier",
    "z": "noise_multiplier",
    "std": "sigma",
    "stddev": "sigma",
    "std_dev": "sigma",
    "sd": "sigma",
    "sigma_sq": "sigma2",
    "sigma_squared": "sigma2",
    "sigma_2": "sigma2",
    "var": "sigma2",
    "sens": "sensitivity",
    "delta_f": "sensitivity",
    "l2_sens": "l2_sensitivity",
    "zcdp": "rho",
    "zcdp_rho": "rho",
    "gdp_mu": "mu",
    "seed": "rng",
    "random_state": "rng",
    "random_seed": "rng",
    "generator": "rng",
    "prng": "rng",
    "random": "rng",
    "random_source": "rng",
    "random_generator": "rng",
}

#: Where a flagged name is the right one, and why.
EXEMPT = {
    # The key of the visibly named reproducible source (STYLE.md convention 1): a seed
    # here is what the class is for, not a random source passed to a computation.
    ("gaussdp.random.ChaCha20Random.__init__", "seed"),
    # The normaliser of ``rng=`` arguments: the source is its subject, not an option.
    ("gaussdp.random.check_rng", "rng"),
    # torch's seed of the initial weights, which are not private; the DP-SGD batches and
    # noise come from its ``rng=`` (docs/audit.md), so the two cannot share one name.
    ("gaussdp.audit.mia.train_classifier", "seed"),
}


def _public_modules() -> Iterator[ModuleType]:
    """The packages of MODULES, then every module under gaussdp whose dotted name has no
    part starting with ``_`` (``__main__`` runs the command line, so it is not imported).

    A module that needs an extra that is not installed is left out (as the extra's own
    tests are); every extra is installed in the project's environment.
    """
    import gaussdp

    for module_name in MODULES:
        yield importlib.import_module(module_name)
    for info in pkgutil.walk_packages(gaussdp.__path__, "gaussdp."):
        if any(part.startswith("_") for part in info.name.split(".")):
            continue
        try:
            yield importlib.import_module(info.name)
        except ModuleNotFoundError as error:
            if (error.name or "gaussdp").startswith("gaussdp"):
                raise


def _public_callables() -> Iterator[tuple[str, Callable[..., object]]]:
    """Every public function, class constructor and public method: the packages'
    ``__all__``, and every name not starting with ``_`` that a public module defines."""
    seen: set[int] = set()
    for module in _public_modules():
        names = getattr(module, "__all__", None) if module.__name__ in MODULES else None
        if names is None:
            names = [
                name
                for name, obj in vars(module).items()
                if not name.startswith("_") and getattr(obj, "__module__", None) == module.__name__
            ]
        for name in names:
            obj = getattr(module, name)
            where = f"{module.__name__}.{name}"
            if id(obj) in seen:
                continue
            seen.add(id(obj))
            if inspect.isclass(obj):
                for attr, member in vars(obj).items():
                    if attr.startswith("_") and attr not in ("__init__", "__call__"):
                        continue
                    func = (
                        member.__func__
                        if isinstance(member, (classmethod, staticmethod))
                        else member
                    )
                    if inspect.isfunction(func):
                        yield f"{where}.{attr}", func
            elif inspect.isfunction(obj):
                yield where, obj


CALLABLES = list(_public_callables())


def test_the_walk_sees_the_api() -> None:
    names = {where for where, _ in CALLABLES}
    assert len(names) > 400
    for expected in (
        "gaussdp.Gaussian.__init__",
        "gaussdp.accounting.PLDAccountant.__init__",
        "gaussdp.accounting.calibrate_noise_multiplier",
        "gaussdp.privacy.gdp_epsilon",
        "gaussdp.release.release_from_spec",
        "gaussdp.ml.make_private",
        "gaussdp.sampling.discrete_gaussian_scalar",
        "gaussdp.random.ChaCha20Random.__init__",
        "gaussdp.audit.explain",
        "gaussdp.synth.Categorical.decode",
        "gaussdp.plot.cks_fig4",
        # Defined in modules whose names the packages do not export.
        "gaussdp.sampling.reference.bernoulli",
        "gaussdp.audit.empirical.audit_dpsgd",
        "gaussdp.audit.mia.train_classifier",
        "gaussdp.synth.model.Measurement.__init__",
        "gaussdp.cli.account.dpsgd_rows",
    ):
        assert expected in names


def test_no_synonyms_of_glossary_names() -> None:
    wrong = []
    for where, func in CALLABLES:
        for parameter in inspect.signature(func).parameters:
            if parameter in SYNONYMS and (where, parameter) not in EXEMPT:
                wrong.append(f"{where}({parameter}): use {SYNONYMS[parameter]}")
    assert not wrong, "\n".join(wrong)


def test_rng_is_keyword_only_everywhere() -> None:
    positional = []
    count = 0
    for where, func in CALLABLES:
        parameter = inspect.signature(func).parameters.get("rng")
        if parameter is None:
            continue
        count += 1
        if parameter.kind is not inspect.Parameter.KEYWORD_ONLY and (where, "rng") not in EXEMPT:
            positional.append(where)
    assert count >= 10
    assert not positional, positional


@pytest.mark.parametrize(
    "name",
    ["sigma", "sigma2", "noise_multiplier", "sample_rate", "epsilon", "delta", "rho", "mu"],
)
def test_every_glossary_name_is_in_use(name: str) -> None:
    # The glossary names are the ones the API actually uses (a renamed concept
    # would leave its glossary entry unused).
    assert any(name in inspect.signature(func).parameters for _, func in CALLABLES)
