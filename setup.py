"""Build of the Cython extensions.

All compiler directives and C flags live here, in one place. ``ONEMODEL_CY_CHECKS=1``
rebuilds every module with bounds, wraparound and initialisation checks switched on
(CI runs the spec tests once that way). ``ONEMODEL_CY_SANITIZE=1`` builds them with
AddressSanitizer and UndefinedBehaviorSanitizer (see docs/safety.md).
"""
import glob
import os
import shutil

import numpy
from Cython.Build import cythonize
from setuptools import Extension, setup
from setuptools.command.build_py import build_py

CHECKS = os.environ.get("ONEMODEL_CY_CHECKS", "0") not in ("", "0")

# ONEMODEL_CY_SANITIZE=1 (gcc or clang) adds AddressSanitizer and UndefinedBehaviorSanitizer
# with no recovery, so that any report aborts the process and fails the run. These flags are
# only added to the C flags below: the float32 rules hold. Load the extensions with the
# sanitizer runtime preloaded (docs/safety.md).
SANITIZE = os.environ.get("ONEMODEL_CY_SANITIZE", "0") not in ("", "0")
if SANITIZE and os.name == "nt":
    raise SystemExit("ONEMODEL_CY_SANITIZE=1 is supported with gcc or clang only")
SANITIZE_FLAGS = (["-fsanitize=address,undefined", "-fno-sanitize-recover=all",
                   "-fno-omit-frame-pointer", "-g"] if SANITIZE else [])

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
           "_alloccount"]

extensions = [
    Extension(
        f"onemodel_cy.{name}",
        [f"onemodel_cy/{name}.pyx"],
        include_dirs=[numpy.get_include(), "onemodel_cy/src"],
        define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION"),
                       ("ONEMODEL_CY_CHECKS", "1" if CHECKS else "0")],
        extra_compile_args=CFLAGS + SANITIZE_FLAGS,
        extra_link_args=SANITIZE_FLAGS,
    )
    for name in MODULES
]


class build_py_with_vectors(build_py):
    """Ship the known-answer vectors (kept in spec_tests/data/) inside the package, for
    ``onemodel-cy conformance``; an editable install reads them from the source tree."""

    def run(self):
        super().run()
        target = os.path.join(self.build_lib, "onemodel_cy", "conformance", "vectors")
        os.makedirs(target, exist_ok=True)
        for path in glob.glob(os.path.join("spec_tests", "data", "*.json")) + [
                os.path.join("spec_tests", "data", "README.md")]:
            shutil.copy(path, target)


setup(ext_modules=cythonize(extensions, compiler_directives=DIRECTIVES),
      cmdclass={"build_py": build_py_with_vectors})
