#!/usr/bin/env bash
# Prepares IWSLT14 German-English the way fairseq's examples/translation/prepare-iwslt14.sh does, for
# the paper presets (`--config=:paper` of the train main and of warmup_ablation). Needs internet, git, perl and python3; it is
# never run by the tests. Result: $OUT/{train,valid,test}.{de,en}, lowercased, Moses-tokenized, joint
# BPE (10k merges), one sentence per line; pass the folder as --config.data.path=$OUT.
#
#   bash scripts/prepare_iwslt14.sh [OUT=data/iwslt14.tokenized.de-en]
#
# Steps (as in fairseq): download de-en.tgz; strip the XML of the training talks; tokenize and
# lowercase with Moses; drop pairs longer than 175 tokens or with a length ratio above 1.5; valid =
# every 23rd training pair (removed from train); test = dev2010 + tst2010-2012 + TEDX dev2012; learn a
# joint BPE on train.de + train.en and apply it everywhere.
set -euo pipefail

OUT=${1:-data/iwslt14.tokenized.de-en}
WORK=${WORK:-$(dirname "$OUT")/iwslt14.work}
URL=${URL:-http://dl.fbaipublicfiles.com/fairseq/data/iwslt14/de-en.tgz}
BPE_TOKENS=${BPE_TOKENS:-10000}
src=de
tgt=en

mkdir -p "$WORK" "$OUT"
cd "$WORK"
[ -d mosesdecoder ] || git clone --depth 1 https://github.com/moses-smt/mosesdecoder.git
[ -d subword-nmt ] || git clone --depth 1 https://github.com/rsennrich/subword-nmt.git
TOKENIZER=mosesdecoder/scripts/tokenizer/tokenizer.perl
LC=mosesdecoder/scripts/tokenizer/lowercase.perl
CLEAN=mosesdecoder/scripts/training/clean-corpus-n.perl
BPEROOT=subword-nmt/subword_nmt

[ -f de-en.tgz ] || curl -fL -o de-en.tgz "$URL"
[ -d de-en ] || tar zxf de-en.tgz
mkdir -p tmp

echo "tokenizing the training talks..."
for l in $src $tgt; do
  grep -v -e '<url>' -e '<talkid>' -e '<keywords>' "de-en/train.tags.de-en.$l" \
    | sed -e 's/<title>//g; s/<\/title>//g; s/<description>//g; s/<\/description>//g' \
    | perl "$TOKENIZER" -threads 8 -l "$l" > "tmp/train.tags.de-en.tok.$l"
done
perl "$CLEAN" -ratio 1.5 tmp/train.tags.de-en.tok $src $tgt tmp/train.tags.de-en.clean 1 175
for l in $src $tgt; do
  perl "$LC" < "tmp/train.tags.de-en.clean.$l" > "tmp/train.tags.de-en.$l"
done

echo "tokenizing dev and test sets..."
for l in $src $tgt; do
  for f in de-en/IWSLT14.TED*."$l".xml de-en/IWSLT14.TEDX*."$l".xml; do
    name=$(basename "$f" .xml)
    grep '<seg id' "$f" | sed -e 's/<seg id="[0-9]*">\s*//g; s/\s*<\/seg>\s*//g' | sed -e "s/\’/\'/g" \
      | perl "$TOKENIZER" -threads 8 -l "$l" | perl "$LC" > "tmp/$name"
  done
done

echo "splitting train / valid / test..."
for l in $src $tgt; do
  awk '{if (NR%23 == 0) print $0; }' "tmp/train.tags.de-en.$l" > "tmp/valid.$l"
  awk '{if (NR%23 != 0) print $0; }' "tmp/train.tags.de-en.$l" > "tmp/train.$l"
  cat "tmp/IWSLT14.TED.dev2010.de-en.$l" "tmp/IWSLT14.TEDX.dev2012.de-en.$l" \
      "tmp/IWSLT14.TED.tst2010.de-en.$l" "tmp/IWSLT14.TED.tst2011.de-en.$l" \
      "tmp/IWSLT14.TED.tst2012.de-en.$l" > "tmp/test.$l"
done

echo "learning a joint BPE with $BPE_TOKENS merges..."
cat tmp/train.$src tmp/train.$tgt > tmp/train.joint
python3 "$BPEROOT/learn_bpe.py" -s "$BPE_TOKENS" < tmp/train.joint > tmp/code
cd - > /dev/null
for split in train valid test; do
  for l in $src $tgt; do
    python3 "$WORK/$BPEROOT/apply_bpe.py" -c "$WORK/tmp/code" < "$WORK/tmp/$split.$l" > "$OUT/$split.$l"
  done
done
wc -l "$OUT"/*.de
echo "done: use --config.data.path=$OUT"
