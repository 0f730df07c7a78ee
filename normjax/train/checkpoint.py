"""Orbax checkpoints of the whole train state plus the data position."""

import os

import jax
import numpy as np
import orbax.checkpoint as ocp

from normjax.train.steps import TrainState


class Checkpointer:
    """Saves (state without hparams/consts, data position) every call; keeps the newest `keep`."""

    def __init__(self, directory: str, keep: int = 2):
        options = ocp.CheckpointManagerOptions(max_to_keep=keep, create=True, enable_async_checkpointing=False)
        self.manager = ocp.CheckpointManager(os.path.abspath(directory), options=options)

    @staticmethod
    def _tree(state: TrainState, data_pos) -> dict:
        # hparams and consts come from the config, so a checkpoint never overrides a changed config
        return {
            "params": state.params,
            "opt_state": state.opt_state,
            "step": state.step,
            "rng": state.rng,
            "bad_steps": state.bad_steps,
            "diverged_at": state.diverged_at,
            "data_pos": np.asarray(data_pos, np.int64),
        }

    def latest_step(self) -> int | None:
        return self.manager.latest_step()

    def save(self, step: int, state: TrainState, data_pos: int) -> None:
        """Blocks until the checkpoint is committed (the metrics written before it stay valid)."""
        self.manager.save(step, args=ocp.args.StandardSave(self._tree(state, data_pos)))
        self.manager.wait_until_finished()

    def restore(self, step: int, like: TrainState) -> tuple[TrainState, int]:
        """(state, data position) of checkpoint `step`; `like` gives structure and shardings."""
        abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, self._tree(like, 0))
        tree = self.manager.restore(step, args=ocp.args.StandardRestore(abstract))
        state = like.replace(**{k: v for k, v in tree.items() if k != "data_pos"})
        return state, int(tree["data_pos"])

    def close(self) -> None:
        self.manager.close()
