"""``jitorch.fx.experimental``: torch.fx's experimental namespace; ``proxy_tensor`` holds ``make_fx``."""
