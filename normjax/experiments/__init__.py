"""The experiment CLIs: `python -m normjax.experiments.<name>` (in the repository also `experiments.<name>`)."""
