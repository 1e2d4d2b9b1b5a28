#include "data/dataset_components.h"

#include <algorithm>
#include <set>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "config/config.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tokenizers/byte_tokenizer.h"
#include "tokenizers/test_vectors.h"
#include "tokenizers/tokenizer_components.h"

namespace cctune {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

absl::StatusOr<std::shared_ptr<const Dataset>> Make(const std::string& body,
                                                    int64_t max_seq_len = 0) {
  CCTUNE_CHECK_OK(RegisterDatasets());
  absl::StatusOr<Config> cfg = Config::FromString("dataset:\n" + body, "ds.yaml");
  CCTUNE_CHECK_OK(cfg);
  static const ByteTokenizer* tok = new ByteTokenizer();
  DatasetContext ctx;
  ctx.tokenizer = tok;
  ctx.max_seq_len = max_seq_len;
  return DatasetRegistry().InstantiateKey(cfg->root(), "dataset", ctx);
}

TEST(DatasetComponentsTest, TorchtuneAlpacaWithLocalJson) {
  auto ds = Make(
      "  _component_: torchtune.datasets.alpaca_dataset\n"
      "  source: json\n"
      "  data_files: data/testdata/alpaca_renamed.json\n"
      "  column_map: {instruction: prompt, input: context, output: response}\n"
      "  split: train[:2]\n");
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_EQ((*ds)->size(), 2);
  EXPECT_FALSE((*ds)->packed());
}

TEST(DatasetComponentsTest, PackedChatAndTextCompletion) {
  auto chat = Make(
      "  _component_: torchtune.datasets.chat_dataset\n"
      "  source: data/testdata/chat_openai.jsonl\n"
      "  conversation_style: openai\n"
      "  packed: true\n",
      128);
  ASSERT_TRUE(chat.ok()) << chat.status();
  EXPECT_TRUE((*chat)->packed());
  ASSERT_GE((*chat)->size(), 1);
  EXPECT_EQ((**chat)[0].tokens.size(), 128u);
  EXPECT_EQ((**chat)[0].tokens.back(), ByteTokenizer::kPad);

  auto text = Make(
      "  _component_: torchtune.datasets.text_completion_dataset\n"
      "  source: data/testdata/text.jsonl\n"
      "  packed: true\n",
      16);
  ASSERT_TRUE(text.ok()) << text.status();
  // Samples are first cut to max_seq_len (42 -> 16, 20 -> 16, 5), then the 37 tokens are
  // split across packs of 16: 3 packs, the last one padded.
  EXPECT_EQ((*text)->size(), 3);
  EXPECT_EQ((*text)->NumTokens(), 37);
  EXPECT_EQ((**text)[2].num_padding, 11);

  auto instruct = Make(
      "  _component_: cctune.datasets.instruct_dataset\n"
      "  source: data/testdata/missing_column.jsonl\n"
      "  column_map: {input: instruction}\n");
  ASSERT_FALSE(instruct.ok());
  EXPECT_THAT(std::string(instruct.status().message()),
              HasSubstr("missing_column.jsonl:2: no column 'output'"));
}

// The tokenizer's truncation_type reaches the instruct datasets: with left, a long sample
// keeps its last max_seq_len tokens (the last becomes EOS, mask 1), with right its first.
TEST(DatasetComponentsTest, QwenTruncationTypeLeftKeepsTheLastTokens) {
  CCTUNE_CHECK_OK(RegisterDatasets());
  CCTUNE_CHECK_OK(RegisterTokenizers());
  const std::string vocab = ValueOrDie(testing::TokenizerFixturePath("qwen_bpe_vocab.json"));
  const std::string merges = ValueOrDie(testing::TokenizerFixturePath("qwen_bpe_merges.txt"));
  auto samples = [&](const std::string& truncation, int64_t max_seq_len) {
    Config tc = ValueOrDie(Config::FromString(
        absl::StrCat("tokenizer:\n  _component_: torchtune.models.qwen2_5.qwen2_5_tokenizer\n"
                     "  path: ", vocab, "\n  merges_file: ", merges,
                     "\n  truncation_type: ", truncation, "\n"),
        "tok.yaml"));
    static std::vector<TokenizerComponent>* keep = new std::vector<TokenizerComponent>();
    keep->push_back(ValueOrDie(TokenizerRegistry().InstantiateKey(tc.root(), "tokenizer")));
    const TokenizerComponent& tok = keep->back();
    DatasetContext ctx;
    ctx.tokenizer = tok.tokenizer.get();
    ctx.prompt_format = tok.prompt_format;
    ctx.max_seq_len = max_seq_len;
    ctx.truncate_left = tok.truncate_left;
    Config dc = ValueOrDie(Config::FromString(
        "dataset:\n  _component_: torchtune.datasets.alpaca_dataset\n"
        "  source: data/testdata/alpaca.jsonl\n",
        "ds.yaml"));
    auto ds = ValueOrDie(DatasetRegistry().InstantiateKey(dc.root(), "dataset", ctx));
    return std::make_pair((*ds)[0], tok.tokenizer->eos_id());
  };
  const auto [full, eos] = samples("left", 0);
  const size_t n = 12;
  ASSERT_GT(full.tokens.size(), n + 4);
  const Sample left = samples("left", n).first;
  const Sample right = samples("right", n).first;
  ASSERT_EQ(left.tokens.size(), n);
  ASSERT_EQ(right.tokens.size(), n);
  for (size_t i = 0; i + 1 < n; ++i) EXPECT_EQ(right.tokens[i], full.tokens[i]) << i;
  // As torchtune's tokenize_messages: messages are added until max_seq_len is reached, then
  // the result is cut from the left, so the kept tokens are a later run of the full sample's.
  size_t offset = 0;
  for (size_t k = 1; k + n - 1 <= full.tokens.size() && offset == 0; ++k) {
    if (std::equal(left.tokens.begin(), left.tokens.end() - 1, full.tokens.begin() + k)) {
      offset = k;
    }
  }
  EXPECT_GT(offset, 0u) << "the left-truncated tokens are not a later run of the sample's";
  EXPECT_EQ(left.tokens.back(), eos);
  EXPECT_EQ(right.tokens.back(), eos);
}

TEST(DatasetComponentsTest, ConfigErrors) {
  auto no_len = Make(
      "  _component_: torchtune.datasets.text_completion_dataset\n"
      "  source: data/testdata/text.jsonl\n"
      "  packed: true\n");
  EXPECT_THAT(std::string(no_len.status().message()), HasSubstr("max_seq_len"));
  auto no_files = Make("  _component_: torchtune.datasets.alpaca_dataset\n  source: json\n");
  EXPECT_THAT(std::string(no_files.status().message()), HasSubstr("data_files"));
  auto no_style = Make(
      "  _component_: torchtune.datasets.chat_dataset\n  source: "
      "data/testdata/chat_openai.jsonl\n");
  EXPECT_THAT(std::string(no_style.status().message()), HasSubstr("conversation_style"));
  auto bad_key = Make(
      "  _component_: torchtune.datasets.alpaca_dataset\n  source: data/testdata/alpaca.jsonl\n"
      "  shuffle: true\n");
  EXPECT_THAT(std::string(bad_key.status().message()), HasSubstr("shuffle"));
}

TEST(SyntheticArithmeticTest, TextIsCorrectDeterministicAndSeeded) {
  std::set<std::string> seen;
  for (int64_t i = 0; i < 200; ++i) {
    auto [prompt, answer] = SyntheticArithmeticText(7, i, 2);
    auto again = SyntheticArithmeticText(7, i, 2);
    EXPECT_EQ(prompt, again.first);
    EXPECT_EQ(answer, again.second);
    // Independent check: parse "a+b=" and add.
    const size_t plus = prompt.find('+');
    ASSERT_NE(plus, std::string::npos) << prompt;
    ASSERT_EQ(prompt.back(), '=') << prompt;
    const long a = std::stol(prompt.substr(0, plus));
    const long b = std::stol(prompt.substr(plus + 1, prompt.size() - plus - 2));
    EXPECT_GE(a, 0);
    EXPECT_LT(a, 100);
    EXPECT_LT(b, 100);
    EXPECT_EQ(std::stol(answer), a + b) << prompt;
    seen.insert(prompt);
  }
  EXPECT_GT(seen.size(), 150u);  // not a constant stream
  int differ = 0;
  for (int64_t i = 0; i < 20; ++i) {
    differ += SyntheticArithmeticText(7, i, 2).first != SyntheticArithmeticText(8, i, 2).first;
  }
  EXPECT_GT(differ, 10);
}

TEST(SyntheticArithmeticTest, DatasetMasksThePrompt) {
  ASSERT_TRUE(RegisterDatasets().ok());
  auto config = Config::FromString(
      "dataset:\n  _component_: cctune.data.synthetic_arithmetic\n  num_samples: 5\n"
      "  seed: 3\n");
  ASSERT_TRUE(config.ok()) << config.status();
  ByteTokenizer tok;
  DatasetContext ctx;
  ctx.tokenizer = &tok;
  auto ds = DatasetRegistry().InstantiateKey(config->root(), "dataset", ctx);
  ASSERT_TRUE(ds.ok()) << ds.status();
  ASSERT_EQ((*ds)->size(), 5);
  for (int64_t i = 0; i < 5; ++i) {
    auto [prompt, answer] = SyntheticArithmeticText(3, i, 2);
    const Sample& s = (**ds)[i];
    ASSERT_EQ(s.tokens.size(), 1 + prompt.size() + answer.size() + 1);
    EXPECT_EQ(s.tokens.front(), ByteTokenizer::kBos);
    EXPECT_EQ(s.tokens.back(), ByteTokenizer::kEos);
    for (size_t t = 0; t < s.tokens.size(); ++t) {
      if (t < 1 + prompt.size()) {
        EXPECT_EQ(s.labels[t], kIgnoreIndex);
      } else {
        EXPECT_EQ(s.labels[t], s.tokens[t]);
      }
    }
  }
}

// split and packed take effect on the synthetic set too.
TEST(SyntheticArithmeticTest, SplitAndPacking) {
  const std::string head = "  _component_: cctune.data.synthetic_arithmetic\n  num_samples: 10\n";
  auto all = Make(head);
  ASSERT_TRUE(all.ok()) << all.status();
  auto second_half = Make(head + "  split: train[50%:]\n");
  ASSERT_TRUE(second_half.ok()) << second_half.status();
  ASSERT_EQ((*second_half)->size(), 5);
  for (int64_t i = 0; i < 5; ++i) EXPECT_EQ((**second_half)[i].tokens, (**all)[5 + i].tokens);
  EXPECT_FALSE(Make(head + "  split: test\n").ok());

  auto packed = Make(head + "  packed: true\n", /*max_seq_len=*/32);
  ASSERT_TRUE(packed.ok()) << packed.status();
  EXPECT_TRUE((*packed)->packed());
  EXPECT_LT((*packed)->size(), 10);
  size_t tokens = 0;
  for (int64_t i = 0; i < (*all)->size(); ++i) tokens += (**all)[i].tokens.size();
  size_t packed_tokens = 0;
  for (int64_t i = 0; i < (*packed)->size(); ++i) {
    EXPECT_EQ((**packed)[i].tokens.size(), 32u);
    packed_tokens += (**packed)[i].tokens.size();
  }
  EXPECT_GE(packed_tokens, tokens);  // every sample is in a pack, the rest is padding
  auto no_len = Make(head + "  packed: true\n");
  EXPECT_FALSE(no_len.ok());
  EXPECT_THAT(std::string(no_len.status().message()), HasSubstr("max_seq_len"));
}

std::vector<int32_t> Bytes(const std::string& text) {
  std::vector<int32_t> out;
  for (unsigned char c : text) out.push_back(c);
  return out;
}

std::vector<int32_t> Cat(std::vector<std::vector<int32_t>> parts) {
  std::vector<int32_t> out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

std::vector<int32_t> Ignored(size_t n) { return std::vector<int32_t>(n, kIgnoreIndex); }

// A Hugging Face hub cache in TEST_TMPDIR, laid out as `huggingface-cli download --repo-type
// dataset` leaves it: refs/main holds the commit, snapshots/<commit>/<file> links into blobs/.
class HubDatasetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::path(std::getenv("TEST_TMPDIR")) / "hub_datasets" /
            ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::remove_all(root_);
    unsetenv("HF_HOME");
    unsetenv("HUGGINGFACE_HUB_CACHE");
    setenv("HF_HUB_CACHE", Hub().c_str(), 1);
  }
  void TearDown() override { unsetenv("HF_HUB_CACHE"); }

  fs::path Hub() const { return root_ / "hub"; }

  void AddDataset(const std::string& repo_id,
                  const std::vector<std::pair<std::string, std::string>>& files) {
    std::string folder = "datasets--" + repo_id;
    folder.replace(folder.find('/'), 1, "--");
    const fs::path repo = Hub() / folder;
    const std::string commit = "5d4f0e1c2b3a49587f6e5d4c3b2a190817263544";
    fs::create_directories(repo / "refs");
    std::ofstream(repo / "refs" / "main") << commit;
    for (size_t i = 0; i < files.size(); ++i) {
      const fs::path blob = repo / "blobs" / ("b" + std::to_string(i));
      const fs::path link = repo / "snapshots" / commit / files[i].first;
      fs::create_directories(blob.parent_path());
      fs::create_directories(link.parent_path());
      std::ofstream(blob) << files[i].second;
      fs::create_symlink(fs::relative(blob, link.parent_path()), link);
    }
  }

  fs::path root_;
};

constexpr char kAlpacaPreamble[] =
    "Below is an instruction that describes a task. Write a response that appropriately "
    "completes the request.\n\n### Instruction:\n";
constexpr char kAlpacaInputPreamble[] =
    "Below is an instruction that describes a task, paired with an input that provides "
    "further context. Write a response that appropriately completes the request.\n\n"
    "### Instruction:\n";

TEST_F(HubDatasetTest, AlpacaCleanedFromTheHubCache) {
  AddDataset("yahma/alpaca-cleaned",
             {{"alpaca_data_cleaned.json",
               R"([{"instruction": "Add 2 and 3.", "input": "", "output": "5"},
                   {"instruction": "Echo", "input": "hi", "output": "hi"}])"},
              {"README.md", "---\nlicense: cc-by-4.0\n---\n"}});
  // torchtune's alpaca builders train on the prompt by default.
  auto ds = Make("  _component_: torchtune.datasets.alpaca_cleaned_dataset\n");
  ASSERT_TRUE(ds.ok()) << ds.status();
  ASSERT_EQ((*ds)->size(), 2);
  const std::vector<int32_t> first =
      Cat({{ByteTokenizer::kBos},
           Bytes(std::string(kAlpacaPreamble) + "Add 2 and 3.\n\n### Response:\n"),
           Bytes("5"),
           {ByteTokenizer::kEos}});
  EXPECT_EQ((**ds)[0].tokens, first);
  EXPECT_EQ((**ds)[0].labels, first);
  EXPECT_THAT((*ds)->source(), HasSubstr("yahma/alpaca-cleaned (train: "));

  // train_on_input: false masks BOS and the prompt; the input gets its own section.
  auto masked = Make(
      "  _component_: torchtune.datasets.alpaca_cleaned_dataset\n"
      "  train_on_input: false\n"
      "  split: train[50%:]\n");
  ASSERT_TRUE(masked.ok()) << masked.status();
  ASSERT_EQ((*masked)->size(), 1);
  const std::string prompt =
      std::string(kAlpacaInputPreamble) + "Echo\n\n### Input:\nhi\n\n### Response:\n";
  EXPECT_EQ((**masked)[0].tokens,
            Cat({{ByteTokenizer::kBos}, Bytes(prompt), Bytes("hi"), {ByteTokenizer::kEos}}));
  EXPECT_EQ((**masked)[0].labels,
            Cat({Ignored(1 + prompt.size()), Bytes("hi"), {ByteTokenizer::kEos}}));
}

TEST_F(HubDatasetTest, HfHomeLocatesTheCacheToo) {
  unsetenv("HF_HUB_CACHE");
  setenv("HF_HOME", root_.c_str(), 1);  // the cache is $HF_HOME/hub
  AddDataset("tatsu-lab/alpaca",
             {{"data/train.jsonl", R"({"instruction": "a", "input": "", "output": "b"})"}});
  auto ds = Make("  _component_: torchtune.datasets.alpaca_dataset\n");
  unsetenv("HF_HOME");
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_EQ((*ds)->size(), 1);
}

TEST_F(HubDatasetTest, InstructWithColumnMapSplitsAndSlices) {
  AddDataset("org/qa", {{"data/train-00000-of-00001.jsonl",
                         "{\"q\": \"q0\", \"a\": \"a0\"}\n{\"q\": \"q1\", \"a\": \"a1\"}\n"
                         "{\"q\": \"q2\", \"a\": \"a2\"}\n{\"q\": \"q3\", \"a\": \"a3\"}\n"},
                        {"data/test-00000-of-00001.jsonl", "{\"q\": \"tq\", \"a\": \"ta\"}\n"}});
  const std::string head =
      "  _component_: torchtune.datasets.instruct_dataset\n"
      "  source: org/qa\n"
      "  column_map: {input: q, output: a}\n";
  auto train = Make(head + "  split: train[1:3]\n");
  ASSERT_TRUE(train.ok()) << train.status();
  ASSERT_EQ((*train)->size(), 2);
  // BOS + "q1" masked (train_on_input defaults to false), "a1" + EOS trained on.
  EXPECT_EQ((**train)[0].tokens,
            Cat({{ByteTokenizer::kBos}, Bytes("q1a1"), {ByteTokenizer::kEos}}));
  EXPECT_EQ((**train)[0].labels, Cat({Ignored(3), Bytes("a1"), {ByteTokenizer::kEos}}));
  EXPECT_EQ((**train)[1].tokens,
            Cat({{ByteTokenizer::kBos}, Bytes("q2a2"), {ByteTokenizer::kEos}}));

  auto test = Make(head + "  split: test\n");
  ASSERT_TRUE(test.ok()) << test.status();
  ASSERT_EQ((*test)->size(), 1);
  EXPECT_EQ((**test)[0].tokens, Cat({{ByteTokenizer::kBos}, Bytes("tqta"), {ByteTokenizer::kEos}}));

  auto last = Make(head + "  split: train[-25%:]\n");
  ASSERT_TRUE(last.ok()) << last.status();
  ASSERT_EQ((*last)->size(), 1);
  EXPECT_EQ((**last)[0].tokens, Cat({{ByteTokenizer::kBos}, Bytes("q3a3"), {ByteTokenizer::kEos}}));

  auto none = Make(head + "  split: validation\n");
  EXPECT_THAT(std::string(none.status().message()), HasSubstr("no split 'validation'"));
  // data_files relative to the snapshot, as a {split: files} map.
  auto by_map = Make(head +
                     "  data_files: {validation: data/test-00000-of-00001.jsonl}\n"
                     "  split: validation\n");
  ASSERT_TRUE(by_map.ok()) << by_map.status();
  EXPECT_EQ((*by_map)->size(), 1);
}

TEST_F(HubDatasetTest, MissingDatasetSaysHowToDownloadIt) {
  auto ds = Make("  _component_: torchtune.datasets.alpaca_cleaned_dataset\n");
  ASSERT_EQ(ds.status().code(), absl::StatusCode::kNotFound);
  const std::string msg(ds.status().message());
  EXPECT_THAT(msg, HasSubstr("building dataset 'cctune.datasets.alpaca_cleaned_dataset'"));
  EXPECT_THAT(msg, HasSubstr("dataset 'yahma/alpaca-cleaned'"));
  EXPECT_THAT(msg, HasSubstr((Hub() / "datasets--yahma--alpaca-cleaned").string()));
  EXPECT_THAT(msg, HasSubstr("from $HF_HUB_CACHE"));
  EXPECT_THAT(msg, HasSubstr("huggingface-cli download --repo-type dataset yahma/alpaca-cleaned"));
  // The recipes' up-front check reports the same.
  auto cfg = Config::FromString("dataset:\n  _component_: torchtune.datasets.slimorca_dataset\n",
                                "ds.yaml");
  ASSERT_TRUE(cfg.ok());
  auto files = ResolveDatasetFiles(*cfg->root().Child("dataset"));
  EXPECT_THAT(std::string(files.status().message()),
              HasSubstr("huggingface-cli download --repo-type dataset Open-Orca/SlimOrca-Dedup"));
}

TEST_F(HubDatasetTest, SlimOrcaSamsumGrammar) {
  AddDataset("Open-Orca/SlimOrca-Dedup",
             {{"slimorca-deduped-cleaned-corrected.jsonl",
               R"({"conversations": [{"from": "system", "value": "S"}, )"
               R"({"from": "human", "value": "H"}, {"from": "gpt", "value": "G"}]})"}});
  auto orca = Make("  _component_: torchtune.datasets.slimorca_dataset\n");
  ASSERT_TRUE(orca.ok()) << orca.status();
  ASSERT_EQ((*orca)->size(), 1);
  // kNone: the contents concatenated; only the gpt turn (and EOS) is trained on.
  EXPECT_EQ((**orca)[0].tokens, Cat({{ByteTokenizer::kBos}, Bytes("SHG"), {ByteTokenizer::kEos}}));
  EXPECT_EQ((**orca)[0].labels, Cat({Ignored(3), Bytes("G"), {ByteTokenizer::kEos}}));
  auto files = ResolveDatasetFiles(
      *Config::FromString("d:\n  _component_: torchtune.datasets.slimorca_dataset\n", "d.yaml")
           ->root()
           .Child("d"));
  ASSERT_TRUE(files.ok()) << files.status();
  EXPECT_EQ(files->size(), 1u);

  AddDataset("Samsung/samsum",
             {{"train.json", R"([{"id": "1", "dialogue": "D", "summary": "Sum"}])"}});
  auto samsum = Make("  _component_: torchtune.datasets.samsum_dataset\n");
  ASSERT_TRUE(samsum.ok()) << samsum.status();
  EXPECT_EQ((**samsum)[0].tokens,
            Cat({{ByteTokenizer::kBos}, Bytes("DSum"), {ByteTokenizer::kEos}}));
  EXPECT_EQ((**samsum)[0].labels, Cat({Ignored(2), Bytes("Sum"), {ByteTokenizer::kEos}}));

  AddDataset("liweili/c4_200m", {{"c4.jsonl", R"({"input": "i", "output": "o"})"}});
  auto grammar = Make("  _component_: torchtune.datasets.grammar_dataset\n");
  ASSERT_TRUE(grammar.ok()) << grammar.status();
  EXPECT_EQ((**grammar)[0].tokens,
            Cat({{ByteTokenizer::kBos}, Bytes("io"), {ByteTokenizer::kEos}}));
}

TEST_F(HubDatasetTest, CorpusBuildersUseTheirSubsetFolders) {
  AddDataset("EleutherAI/wikitext_document_level",
             {{"wikitext-103-v1/train.jsonl", R"({"page": "Wiki page"})"},
              {"wikitext-2-v1/train.jsonl", R"({"page": "other"})"}});
  auto wiki = Make("  _component_: torchtune.datasets.wikitext_dataset\n  max_seq_len: 5\n");
  ASSERT_TRUE(wiki.ok()) << wiki.status();
  ASSERT_EQ((*wiki)->size(), 1);
  // BOS + text + EOS, cut to max_seq_len; all of it trained on.
  EXPECT_EQ((**wiki)[0].tokens, Cat({{ByteTokenizer::kBos}, Bytes("Wiki")}));
  EXPECT_EQ((**wiki)[0].labels, (**wiki)[0].tokens);
  auto wiki2 =
      Make("  _component_: torchtune.datasets.wikitext_dataset\n  subset: wikitext-2-v1\n");
  ASSERT_TRUE(wiki2.ok()) << wiki2.status();
  EXPECT_EQ((**wiki2)[0].tokens,
            Cat({{ByteTokenizer::kBos}, Bytes("other"), {ByteTokenizer::kEos}}));

  AddDataset("ccdv/cnn_dailymail",
             {{"3.0.0/train.jsonl", R"({"article": "A", "highlights": "h"})"}});
  auto cnn = Make("  _component_: torchtune.datasets.cnn_dailymail_articles_dataset\n");
  ASSERT_TRUE(cnn.ok()) << cnn.status();
  EXPECT_EQ((**cnn)[0].tokens, Cat({{ByteTokenizer::kBos}, Bytes("A"), {ByteTokenizer::kEos}}));
}

TEST_F(HubDatasetTest, AlpacaFromParquetMatchesTheSameRowsInJson) {
  // The hub's tatsu-lab/alpaca is one Parquet file (data/testdata/make_parquet.py wrote this
  // one with pyarrow); its rows are those of the JSON test above.
  std::ifstream in("data/testdata/alpaca.parquet", std::ios::binary);
  const std::string parquet((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_FALSE(parquet.empty());
  AddDataset("tatsu-lab/alpaca", {{"data/train-00000-of-00001-a09b74b3ef9c3b56.parquet", parquet}});
  AddDataset("yahma/alpaca-cleaned",
             {{"alpaca_data_cleaned.json",
               R"([{"instruction": "Add 2 and 3.", "input": "", "output": "5"},
                   {"instruction": "Echo", "input": "hi", "output": "hi"}])"}});
  auto from_parquet = Make("  _component_: torchtune.datasets.alpaca_dataset\n");
  ASSERT_TRUE(from_parquet.ok()) << from_parquet.status();
  auto from_json = Make("  _component_: torchtune.datasets.alpaca_cleaned_dataset\n");
  ASSERT_TRUE(from_json.ok()) << from_json.status();
  ASSERT_EQ((*from_parquet)->size(), 2);
  ASSERT_EQ((*from_json)->size(), 2);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ((**from_parquet)[i].tokens, (**from_json)[i].tokens) << i;
    EXPECT_EQ((**from_parquet)[i].labels, (**from_json)[i].labels) << i;
  }
  EXPECT_EQ((**from_parquet)[0].tokens,
            Cat({{ByteTokenizer::kBos},
                 Bytes(std::string(kAlpacaPreamble) + "Add 2 and 3.\n\n### Response:\n"),
                 Bytes("5"),
                 {ByteTokenizer::kEos}}));
}

TEST_F(HubDatasetTest, ChatFromParquetListOfStructs) {
  std::ifstream in("data/testdata/slimorca.parquet", std::ios::binary);
  const std::string parquet((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_FALSE(parquet.empty());
  AddDataset("org/orca-parquet", {{"data/train-00000-of-00001.parquet", parquet}});
  auto orca = Make(
      "  _component_: torchtune.datasets.slimorca_dataset\n"
      "  source: org/orca-parquet\n");
  ASSERT_TRUE(orca.ok()) << orca.status();
  ASSERT_EQ((*orca)->size(), 1);
  EXPECT_EQ((**orca)[0].tokens, Cat({{ByteTokenizer::kBos}, Bytes("SHG"), {ByteTokenizer::kEos}}));
  EXPECT_EQ((**orca)[0].labels, Cat({Ignored(3), Bytes("G"), {ByteTokenizer::kEos}}));
}

TEST_F(HubDatasetTest, UnsupportedPiecesAreClearErrors) {
  AddDataset("org/zstd", {{"train.parquet", [] {
                             std::ifstream in("data/testdata/zstd.parquet", std::ios::binary);
                             return std::string((std::istreambuf_iterator<char>(in)),
                                                std::istreambuf_iterator<char>());
                           }()}});
  auto zstd = Make(
      "  _component_: torchtune.datasets.text_completion_dataset\n"
      "  source: org/zstd\n");
  EXPECT_EQ(zstd.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(zstd.status().message()), HasSubstr("compressed with ZSTD"));
  auto pref = Make("  _component_: torchtune.datasets.stack_exchange_paired_dataset\n");
  EXPECT_EQ(pref.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(pref.status().message()),
              HasSubstr("torchtune.datasets.stack_exchange_paired_dataset is a preference"));
  auto filter = Make(
      "  _component_: torchtune.datasets.text_completion_dataset\n"
      "  source: data/testdata/text.jsonl\n"
      "  filter_fn: my.module.keep\n");
  EXPECT_EQ(filter.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(filter.status().message()), HasSubstr("filter_fn"));
}

TEST(DatasetComponentsTest, LocalFolderAndFileLists) {
  // A local folder is searched as a snapshot is; data_files may list several files.
  auto folder = Make(
      "  _component_: torchtune.datasets.text_completion_dataset\n"
      "  source: data/testdata\n"
      "  data_files: [text.jsonl, text.jsonl]\n");
  ASSERT_TRUE(folder.ok()) << folder.status();
  auto once = Make(
      "  _component_: torchtune.datasets.text_completion_dataset\n"
      "  source: data/testdata/text.jsonl\n");
  ASSERT_TRUE(once.ok()) << once.status();
  ASSERT_EQ((*folder)->size(), 2 * (*once)->size());
  EXPECT_EQ((**folder)[(*once)->size()].tokens, (**once)[0].tokens);
  auto split = Make(
      "  _component_: torchtune.datasets.text_completion_dataset\n"
      "  source: data/testdata/text.jsonl\n"
      "  split: test\n");
  EXPECT_THAT(std::string(split.status().message()), HasSubstr("one split, 'train'"));
}

}  // namespace
}  // namespace cctune
