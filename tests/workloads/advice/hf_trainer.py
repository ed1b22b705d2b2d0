"""transformers' Trainer compiles and calls the model (TrainingArguments(torch_compile=True)).

A tiny GPT-2 (built from a config, no download) and a word-level tokenizer
made in memory train on 18 texts of 4 to 29 words, 4 a batch, for 2 epochs.
The data collator pads each batch to its longest text, so the sequence length
changes from batch to batch, and the last batch of each epoch has 2 rows: the
model recompiles on both. The user makes no call of the compiled model:
Trainer does, so the fixes are Trainer's argument and the collator's.

--pad        the collator pads every batch to a multiple of 32
             (DataCollatorForLanguageModeling(..., pad_to_multiple_of=32))
--drop-last  TrainingArguments(dataloader_drop_last=True)
"""

import argparse
import tempfile

import torch
from tokenizers import Tokenizer
from tokenizers.models import WordLevel
from tokenizers.pre_tokenizers import Whitespace
from transformers import (
    DataCollatorForLanguageModeling,
    GPT2Config,
    GPT2LMHeadModel,
    PreTrainedTokenizerFast,
    Trainer,
    TrainingArguments,
)

parser = argparse.ArgumentParser()
parser.add_argument("--pad", action="store_true")
parser.add_argument("--drop-last", action="store_true")
args = parser.parse_args()

torch.manual_seed(0)
torch.set_num_threads(1)
vocab = {"[PAD]": 0, "[UNK]": 1, **{f"w{i}": i + 2 for i in range(60)}}
words = Tokenizer(WordLevel(vocab, unk_token="[UNK]"))
words.pre_tokenizer = Whitespace()
tokenizer = PreTrainedTokenizerFast(tokenizer_object=words, pad_token="[PAD]", unk_token="[UNK]")
g = torch.Generator().manual_seed(1)
lengths = [int(torch.randint(4, 30, (1,), generator=g)) for _ in range(18)]
texts = [" ".join(f"w{int(t)}" for t in torch.randint(0, 60, (n,), generator=g)) for n in lengths]
data = [tokenizer(t) for t in texts]

config = GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=64, n_positions=64, bos_token_id=1, eos_token_id=1)
model = GPT2LMHeadModel(config)
collator = DataCollatorForLanguageModeling(tokenizer, mlm=False, pad_to_multiple_of=32 if args.pad else None)  # COLLATOR
training = TrainingArguments(
    output_dir=tempfile.mkdtemp(),
    torch_compile=True,
    torch_compile_backend="eager",
    use_cpu=True,
    num_train_epochs=2,
    per_device_train_batch_size=4,
    dataloader_drop_last=args.drop_last,
    report_to="none",
    save_strategy="no",
    logging_strategy="no",
    disable_tqdm=True,
)
trainer = Trainer(model=model, args=training, train_dataset=data, data_collator=collator)
trainer.train()  # TRAIN
print("ok")
