"""llm/model_files.py: a model directory's size read from its safetensors headers (the page's corpus line)."""


def test_parameter_count_reads_safetensors_headers(tiny_model_dir):
    import torch
    from transformers import AutoModelForCausalLM

    from scholar_agents.llm.model_files import human_count, parameter_count

    model = AutoModelForCausalLM.from_pretrained(str(tiny_model_dir), torch_dtype=torch.float32)
    # parameters() yields a tied weight once, as safetensors stores it once
    assert parameter_count(tiny_model_dir) == sum(p.numel() for p in model.parameters())
    assert human_count(135_000_000) == "135M" and human_count(7_615_616_512) == "7.6B" and human_count(None)
