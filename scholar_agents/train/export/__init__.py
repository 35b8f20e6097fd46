"""``scholar train export export.source=<training output>``: one HF safetensors directory to serve (vLLM) or share.

Sources it understands (the directory layouts our trainers write):
- an SFT output dir (``sft.output_dir``: ``checkpoint-N/`` + ``final/``) -> ``final/``, else the newest complete
  checkpoint;
- an SFT ``final/`` or ``checkpoint-N/``: a full model, or a PEFT LoRA adapter (``sft.lora.merge_on_save=false``,
  ZeRO-3, or an intermediate checkpoint of a LoRA run);
- a PPO run dir, its ``checkpoints/`` root or one ``step_NNNNNN/`` (``train/ppo/checkpoint.py``) -> ``policy/``
  of the newest complete checkpoint (a full model, or the LoRA adapter of a ``ppo.lora.enabled`` run);
- any HF model directory or PEFT adapter directory.

A LoRA adapter is merged into its base (``merge_and_unload``, in fp32: adding a small low-rank delta to bf16
weights would round much of it away) and then cast to ``export.dtype``. The output has the weights
(safetensors only), config, tokenizer + chat template (the Selector and the Crawler render prompts with it),
``generation_config.json`` and a model card ``README.md`` (training config, data, metrics, git commit, the
validation result). It is written under a temporary name and renamed when complete.

Validation (``export.validate``), on the logits of a Selector and a Crawler prompt: (1) for LoRA, the merged model
against the *unmerged* PEFT model in fp32, so a wrong merge (wrong scaling, a missed module, a stale adapter) fails
the export instead of shipping; (2) the written directory, loaded back with transformers (tokenizer and chat
template rendering the same ids), against the model that was written. A 16-bit export's drift from the fp32 source
is measured and reported in the model card.

Push (``export.push=true`` + ``export.hub_repo_id``): uploads the directory to the Hugging Face Hub with the token
from ``HF_TOKEN`` (never from config, never logged); needs network and ``HF_HUB_OFFLINE=0`` set explicitly, since
every command runs hub-offline by default.

The package, one job per module: ``config.py`` (``export.*``), ``sources.py`` (what the source is),
``records.py`` (the training run's config, data and metrics), ``load.py`` (the source loaded in fp32),
``validate.py`` (the logit checks), ``model_card.py`` (``README.md``), ``hub.py`` (the push) and ``command.py``
(``train_export``, the order of it all and the atomic write).
"""
