"""Build of the Cython extensions.

All compiler directives and C flags live here, in one place. ``ONEMODEL_CY_CHECKS=1``
rebuilds every module with bounds, wraparound and initialisation checks switched on
(CI runs the spec tests once that way).
"""
import os

import numpy
from Cython.Build import cythonize
from setuptools import Extension, setup

CHECKS = os.environ.get("ONEMODEL_CY_CHECKS", "0") not in ("", "0")

DIRECTIVES = {
    "language_level": 3,
    "boundscheck": CHECKS,
    "wraparound": CHECKS,
    "initializedcheck": CHECKS,
    "cdivision": True,
    "embedsignature": True,
    "freethreading_compatible": True,     # pyproject.toml requires Cython >= 3.1
}

# §2 and §6 are defined on unfused, correctly rounded float32 arithmetic: never let the
# compiler contract a*b+c into an FMA, never allow fast-math, never tune for the build host.
if os.name == "nt":
    CFLAGS = ["/O2", "/fp:precise"]
else:
    # Vectorising the copy/augment loops is exact: SIMD float32 multiply and add round
    # each lane exactly like the scalar instruction.
    CFLAGS = ["-O2", "-ftree-vectorize", "-fvect-cost-model=dynamic", "-ffp-contract=off",
              "-fno-fast-math"]

MODULES = ["_validate", "_rng", "_permute", "_samplers", "_bufferpool", "_collate", "_image", "_datasets",
           "testing._alloccount"]    # dotted names are modules of subpackages

extensions = [
    Extension(
        f"onemodel_cy.{name}",
        [f"onemodel_cy/{name.replace('.', '/')}.pyx"],
        include_dirs=[numpy.get_include(), "onemodel_cy/src"],
        define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION"),
                       ("ONEMODEL_CY_CHECKS", "1" if CHECKS else "0")],
        extra_compile_args=CFLAGS,
    )
    for name in MODULES
]


setup(ext_modules=cythonize(extensions, compiler_directives=DIRECTIVES))
