"""amplification presets: quick (CPU, about a minute), standard (the committed report), paper (accelerators).

python -m normjax.studies.amplification --config=:quick --workdir=results

Cost, measured on this 2-core CPU while it was shared with other jobs (load 2 to 30, so an idle machine is
faster): one model layout (placement x depth) costs its compiles once, 32-47 s of wall time (about 9 s of CPU)
for d_model 32 at L = 2 and at L = 36 alike (the layers are scanned); each further seed of a layout costs
0.5 s (L = 2) to 0.8 s (Post-LN, L = 36), 4 s for admin_profiled at L = 36 (profiling runs sublayer by
sublayer). admin and admin_profiled share one layout. The same measurement of the study's previous version gave
33-49 s per layout, and that version's :standard (25 layouts, 16 seeds) took 58 s on an idle machine: about
2.3 s per layout there. Hence :quick (12 layouts, 8 seeds) about a minute and :standard (20 layouts, 16 seeds,
N up to 72) about 3 minutes on an idle machine.
"""

import ml_collections

import normjax
from normjax.studies import schema as s
from normjax.studies.presets import preset
from normjax.train.config_io import ConfigError
from normjax.train.data_text import byte_vocab


def _quick():
    c = ml_collections.ConfigDict()
    c.placements = ("post", "pre", "admin", "admin_profiled")
    c.depths = (2, 6, 16, 36)  # layers; N = 2 L residual sublayers: 4, 12, 32, 72
    c.vocab_size = 260  # the byte LM's vocabulary (256 bytes + 4 specials)
    c.d_model, c.num_heads, c.d_ff = 32, 4, 128
    c.batch_size, c.seq_len = 4, 16
    c.max_bytes = 200_000  # the stdlib sources read for the batches (their sha256 is in results.json)
    c.seed = 0
    c.num_seeds = 8  # seeds cost no compile; Post-LN's output change is heavy-tailed over seeds
    # random_sign (Liu et al.'s tool's default: eps * random sign on every non-bias, non-norm weight) is the
    # update L1 is judged on (measure.JUDGED); grad_sign (-eps sign(grad) of the task loss, their
    # --gradient_as_delta) is reported beside it. Both at the eps of their tool (fairseq_task.py lines 250, 256).
    c.kinds = ("random_sign", "grad_sign")
    c.eps = {"random_sign": 1e-4, "grad_sign": 1e-6}
    c.scopes = ("weights",)  # Liu et al.'s perturbed set; "branch" (sublayer weights) and "all" may be added
    return c


def _standard():
    c = _quick()
    c.placements = ("post", "pre", "admin", "admin_profiled", "deepnorm")
    c.depths = (2, 4, 8, 16, 36)  # N = 4 .. 72
    c.num_seeds = 30  # Post-LN's model selection straddled 0 at 16 seeds (1.40 [-0.08, 2.87]): about 30 needed
    return c


def _paper():
    c = _standard()
    c.depths = (3, 6, 12, 18, 36, 50, 100)
    c.d_model, c.num_heads, c.d_ff = 512, 8, 2048
    c.batch_size, c.seq_len, c.num_seeds = 16, 64, 5
    return c


def get_config(arg: str = "quick"):
    return preset(arg, {"quick": _quick, "standard": _standard, "paper": _paper})


SCHEMA = s.MODEL | dict(
    placements=s.choices(*normjax.PLACEMENTS, "admin_profiled"),
    depths=s.DEPTHS,
    batch_size=s.POS,
    seq_len=s.POS,
    seed=s.SEED,
    num_seeds=s.POS,
    max_bytes=s.POS,
    kinds=s.choices("random_sign", "grad_sign"),
    eps=dict(random_sign=s.POS_FLOAT, grad_sign=s.POS_FLOAT),
    scopes=s.choices("weights", "branch", "all"),
)


def check(values: dict) -> None:
    """The sizes build; at least two depths to fit the growth laws; the byte LM's ids fit the vocabulary."""
    s.check_sizes(values)
    s.check_fit_depths("amplification", values)
    if values["vocab_size"] < len(byte_vocab()):
        raise ConfigError(
            f"config.vocab_size={values['vocab_size']} is smaller than the byte LM's vocabulary "
            f"({len(byte_vocab())}: 256 bytes + specials)"
        )
