"""Build hook for the one optional C extension, ``mm_preproc._fastpatch``.

All metadata lives in pyproject.toml. The extension is ``optional``: where it does not compile
(no C compiler, an unusual platform) the install goes on and mm_preproc uses its numpy/OpenCV
path, which gives the same values. Rebuild in place after editing the C file:
``python setup.py build_ext --inplace``.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "mm_preproc._fastpatch",
            ["mm_preproc/_fastpatch.c"],
            extra_compile_args=["-O3"],
            libraries=["m"],
            optional=True,
        )
    ]
)
