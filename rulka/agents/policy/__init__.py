"""PPO, GRPO and DPO: the policy-optimisation learners on one discrete actor-critic.

``network`` (the actor-critic), ``actor`` (what workers run: samples, records log pi and V),
``rollout`` (segments -> rollouts with shaped rewards), ``memory`` (trajectory memories),
``losses`` (the math), ``ppo`` / ``grpo`` / ``dpo`` (the learners), ``episodes`` (inert episode
and pair files for offline DPO), ``settings`` (config -> plugins).
"""
