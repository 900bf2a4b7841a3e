"""``python -m ray_sampler``: the same as the ``ray-sampler`` command."""

from ray_sampler.cli import main

if __name__ == "__main__":
    main()
