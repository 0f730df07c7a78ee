"""Repository shims: `python -m experiments.<name>` runs the packaged main (`normjax.studies.<name>`,
`normjax.experiments.train`); normjax.blas_threads gives them one OpenBLAS thread, as the installed mains."""
