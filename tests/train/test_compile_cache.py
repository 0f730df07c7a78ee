"""JAX's persistent compilation cache: on by default on accelerators, opt-in on the CPU, an existing setting
respected, "off" honoured."""

import warnings

import jax
import pytest

from normjax.train import compile_cache


@pytest.fixture
def no_cache_setting(monkeypatch):
    before = jax.config.jax_compilation_cache_dir
    jax.config.update("jax_compilation_cache_dir", None)
    yield monkeypatch
    jax.config.update("jax_compilation_cache_dir", before)
    compile_cache.reset_cache()


def test_the_cache_goes_to_the_user_cache_unless_told_otherwise(no_cache_setting, tmp_path):
    no_cache_setting.delenv(compile_cache.CACHE_ENV, raising=False)
    no_cache_setting.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert compile_cache.default_cache_dir("gpu") == str(tmp_path / "xdg" / "normjax" / "xla")
    assert compile_cache.default_cache_dir("cpu") is None  # opt-in on the CPU (compile_cache.OPT_IN_BACKENDS)
    assert compile_cache.enable_compilation_cache() is None and jax.config.jax_compilation_cache_dir is None
    no_cache_setting.setenv(compile_cache.CACHE_ENV, "off")
    assert compile_cache.enable_compilation_cache() is None and jax.config.jax_compilation_cache_dir is None
    no_cache_setting.setenv(compile_cache.CACHE_ENV, str(tmp_path / "mine"))
    assert compile_cache.enable_compilation_cache() == str(tmp_path / "mine")
    assert jax.config.jax_compilation_cache_dir == str(tmp_path / "mine") and (tmp_path / "mine").is_dir()


def test_an_existing_setting_is_respected(no_cache_setting, tmp_path):
    jax.config.update("jax_compilation_cache_dir", str(tmp_path / "theirs"))
    assert compile_cache.enable_compilation_cache(str(tmp_path / "ours")) == str(tmp_path / "theirs")
    assert jax.config.jax_compilation_cache_dir == str(tmp_path / "theirs") and not (tmp_path / "ours").exists()


def test_count_compiles_counts_each_new_program_once_by_name():
    f = jax.jit(lambda x: x * 3.0 + 1.0)
    with compile_cache.count_compiles() as compiles:
        f(jax.numpy.ones(5))
        f(jax.numpy.ones(5) * 2)  # same shape: no compile
        f(jax.numpy.ones(6))  # a new shape: a new program
    assert compiles["jit(<lambda>)"] == 2


def test_an_unreadable_entry_warns_no_one_where_the_cache_is_on(no_cache_setting, tmp_path, recwarn):
    """A half-written entry (another process writing it, or killed while it did): JAX compiles the program itself;
    its warning is dropped, other warnings are not."""
    compile_cache.enable_compilation_cache(str(tmp_path / "xla"))
    warnings.warn(
        f"{compile_cache.UNREADABLE_ENTRY} for 'jit_f': error: Error -5 while decompressing data",
        UserWarning,
        stacklevel=1,
    )
    warnings.warn("another warning", UserWarning, stacklevel=1)
    assert [str(w.message) for w in recwarn] == ["another warning"]
