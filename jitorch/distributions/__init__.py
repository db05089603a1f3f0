"""``jitorch.distributions``: PyTorch's probability distributions built from jitorch ops.

``log_prob`` and ``entropy`` are differentiable in the parameters, ``rsample`` is reparameterized (Gamma, Beta,
Dirichlet, Chi2 and StudentT through implicit gradients), and every draw goes through jitorch's random functions, so
``jitorch.manual_seed`` makes sampling reproducible. One module per family, under torch's module names.

>>> import jitorch
>>> import jitorch.distributions as D
>>> d = D.Normal(jitorch.tensor([0.0]), jitorch.tensor([1.0]))
>>> round(float(d.log_prob(jitorch.tensor([0.0]))), 4)
-0.9189
"""
from . import constraints
from .bernoulli import Bernoulli
from .beta import Beta
from .categorical import Categorical
from .chi2 import Chi2
from .dirichlet import Dirichlet
from .distribution import Distribution
from .exp_family import ExponentialFamily
from .gamma import Gamma
from .independent import Independent
from .kl import kl_divergence, register_kl
from .multivariate_normal import MultivariateNormal
from .normal import Normal
from .studentT import StudentT
from .uniform import Uniform

__all__ = ["Bernoulli", "Beta", "Categorical", "Chi2", "Dirichlet", "Distribution", "ExponentialFamily", "Gamma",
           "Independent", "MultivariateNormal", "Normal", "StudentT", "Uniform", "constraints", "kl_divergence",
           "register_kl"]
