"""The papers the shipped methods, plug-ins and models declare (`decoding.papers`), one constant each.

Each entry was checked once, when written, against the paper's own page (arXiv, the venue's
proceedings, or its repository) with the project's search tool. Where a page could not be read
offline the entry says "not verified offline" in its note and carries no arXiv id: never a guess.
Registrations import what they cite (`papers=(bib.CASTEL_2022,)`); a third party's plug-in declares
its own `Paper`s the same way.
"""

from __future__ import annotations

from decoding.papers import Paper

NOT_VERIFIED = "title and authors as this project's docstring gives them; not verified offline"

# --- token-level methods and sampling ---------------------------------------------------------------
HOLTZMAN_2020 = Paper("The Curious Case of Neural Text Degeneration", "Holtzman et al.", 2020, arxiv="1904.09751",
                      note="top-p (nucleus) sampling")
FAN_2018 = Paper("Hierarchical Neural Story Generation", "Fan et al.", 2018, arxiv="1805.04833", note="top-k sampling")
NGUYEN_2024 = Paper("Turning Up the Heat: Min-p Sampling for Creative and Coherent LLM Outputs", "Nguyen et al.", 2024,
                    arxiv="2407.01082", note="min-p (arXiv v1 was titled \"Min P Sampling: Balancing Creativity and "
                                             "Coherence at High Temperature\")")
MEISTER_2023 = Paper("Locally Typical Sampling", "Meister et al.", 2023, arxiv="2202.00666", note="typical-p")
HEWITT_2022 = Paper("Truncation Sampling as Language Model Desmoothing", "Hewitt et al.", 2022,
                    note="epsilon and eta cutoffs; title and first author checked (the authors' repository), "
                         "arXiv id not verified offline")
KESKAR_2019 = Paper("CTRL: A Conditional Transformer Language Model for Controllable Generation", "Keskar et al.",
                    2019, arxiv="1909.05858", note="the repetition penalty, as transformers implements it")
BAGHAEI_POTRAGHLOO_2025 = Paper("Top-H Decoding: Adapting the Creativity and Coherence with Bounded Entropy in Text "
                                "Generation", "Baghaei Potraghloo et al.", 2025, arxiv="2509.02510",
                                venue="NeurIPS 2025", note="top-H truncation")
BASU_2021 = Paper("Mirostat: A Neural Text Decoding Algorithm that Directly Controls Perplexity", "Basu et al.", 2021,
                  arxiv="2007.14966", note="mirostat v2, in llama.cpp's simplified form")
SU_2022 = Paper("A Contrastive Framework for Neural Text Generation", "Su et al.", 2022, arxiv="2202.06417",
                venue="NeurIPS 2022", note="contrastive search")
LAN_2022 = Paper("Momentum Decoding: Open-ended Text Generation As Graph Exploration", "Lan et al.", 2022,
                 arxiv="2212.02175", note="the resistance grows linearly with the loop depth here (the paper's "
                                          "lookup-table resistance is not reproduced)")
HE_2025 = Paper("Towards Better Code Generation: Adaptive Decoding with Uncertainty Guidance", "He et al.", 2025,
                arxiv="2506.08980", note="AdaDec (later versions retitled \"AdaDec: ...\"); the entropy threshold is a "
                                         "parameter here, the paper learns it per model")
SHEN_2024 = Paper("Superposed Decoding: Multiple Generations from a Single Autoregressive Inference Pass", "Shen et al.",
                  2024, arxiv="2405.18400", note="the n-gram table is built from the prompt only (the paper's comes "
                                                 "from a large corpus)")
CASTEL_2022 = Paper("How Optimal is Greedy Decoding for Extractive Question Answering?",
                    "Castel, Ram, Efrat and Levy", 2022, arxiv="2108.05857", venue="AKBC 2022",
                    note="exact-extract: the most probable passage span, scored exactly")

# --- faster decoding without a drafter (issue 29) ---------------------------------------------------
SUN_2024_LUD = Paper("Decoding at the Speed of Thought: Harnessing Parallel Decoding of Lexical Units for LLMs",
                     "Sun et al.", 2024, arxiv="2405.15208", venue="LREC-COLING 2024",
                     note="Lexical Unit Decoding; here on tiny-ar fine-tuned for it (tiny-ar-lud), units annotated with "
                          "tiny-ar's own confidence, the end of a unit learnt as a label")
LIU_ZHANG_2025 = Paper("HAMburger: Accelerating LLM Inference via Token Smashing", "Liu and Zhang", 2025,
                       arxiv="2505.20438", note="smashed slots and micro-steps; here a linear compositional embedder "
                                                "and a GRU micro-step decoder on tiny-ar (tiny-ar-hamburger)")
LI_2024_FTP = Paper("FTP: A Fine-grained Token-wise Pruner for Large Language Models via Token Routing", "Li et al.",
                    2024, arxiv="2412.11494", note="a per-token, per-block router on the frozen model; here the router "
                    "reads the hidden state and one density target holds for every block (the paper's router reads "
                    "four low-dimensional features and a searched schedule sets each block's sparsity)")

# --- speculative decoding ----------------------------------------------------------------------------
LEVIATHAN_2023 = Paper("Fast Inference from Transformers via Speculative Decoding", "Leviathan, Kalman and Matias",
                       2023, arxiv="2211.17192", venue="ICML 2023")
CHEN_2023 = Paper("Accelerating Large Language Model Decoding with Speculative Sampling", "Chen et al.", 2023,
                  arxiv="2302.01318")
MIAO_2024 = Paper("SpecInfer: Accelerating Large Language Model Serving with Tree-based Speculative Inference and "
                  "Verification", "Miao et al.", 2024, arxiv="2305.09781", venue="ASPLOS 2024",
                  note="multi-candidate verification of a token tree (arXiv v1 title: \"SpecInfer: Accelerating "
                       "Generative LLM Serving with Speculative Inference and Token Tree Verification\", 2023)")
CHEN_2024 = Paper("Sequoia: Scalable, Robust, and Hardware-aware Speculative Decoding", "Chen et al.", 2024,
                  arxiv="2402.12374", note="siblings drawn without replacement")
JEON_2024 = Paper("Recursive Speculative Decoding: Accelerating LLM Inference via Sampling Without Replacement",
                  "Jeon et al.", 2024, arxiv="2402.14160", note="rule rsd (the default)")
SUN_2023 = Paper("SpecTr: Fast Speculative Decoding via Optimal Transport", "Sun et al.", 2023, venue="NeurIPS 2023",
                 note="rule spectr (k-sequential selection); arXiv id not verified offline")
XIONG_2024 = Paper("DySpec: Faster Speculative Decoding with Dynamic Token Tree Structure", "Xiong et al.", 2024,
                   arxiv="2410.11744", note="dynamic trees grown by cumulative draft probability")
LI_2024_EAGLE = Paper("EAGLE: Speculative Sampling Requires Rethinking Feature Uncertainty",
                      "Li, Wei, Zhang and Zhang", 2024, arxiv="2401.15077", venue="ICML 2024",
                      note="the one-layer feature-level head (trained here for smollm2-135m)")
LI_2024_EAGLE2 = Paper("EAGLE-2: Faster Inference of Language Models with Dynamic Draft Trees", "Li et al.", 2024,
                       arxiv="2406.16858", note="dynamic draft trees")
LI_2025_EAGLE3 = Paper("EAGLE-3: Scaling up Inference Acceleration of Large Language Models via Training-Time Test",
                       "Li, Wei, Zhang and Zhang", 2025, arxiv="2503.01840",
                       note="only its reduced draft vocabulary is used here")
ZHAO_2025 = Paper("FR-Spec: Accelerating Large-Vocabulary Language Models via Frequency-Ranked Speculative Sampling",
                  "Zhao et al.", 2025, arxiv="2502.14856", venue="ACL 2025",
                  note="the draft vocabulary: the target's most frequent tokens")
ELHOUSHI_2024 = Paper("LayerSkip: Enabling Early Exit Inference and Self-Speculative Decoding", "Elhoushi et al.", 2024,
                      arxiv="2404.16710", note="self-speculation from the first layers; the early-exit loss of "
                                               "tiny-ar-layerskip")
ENTEZARI_ZARCH_2025 = Paper("DEL: Context-Aware Dynamic Exit Layer for Efficient Self-Speculative Decoding",
                            "Entezari Zarch et al.", 2025, arxiv="2504.05598",
                            note="exit_layer=0: the exit layer and draft length chosen per round")
KAVEHZADEH_2024 = Paper("S2D: Sorted Speculative Decoding For More Efficient Deployment of Nested Large Language "
                        "Models", "Kavehzadeh et al.", 2024, arxiv="2407.01955",
                        note="drafter s2d: tiny-ar-s2d's nested sub-models, the smallest confident one per position")
GUI_2024 = Paper("Boosting Lossless Speculative Decoding via Feature Sampling and Partial Alignment Distillation",
                 "Gui et al.", 2024, arxiv="2408.15562",
                 note="FSPAD: `python -m decoding.training.eagle train --fspad`; its forms are this project's reading "
                      "of the paper's description")
QUAN_2025 = Paper("RASD: Retrieval-Augmented Speculative Decoding", "Quan et al.", 2025, note=NOT_VERIFIED)
LUO_2024 = Paper("Turning Trash into Treasure: Accelerating Inference of Large Language Models with Token Recycling",
                 "Luo et al.", 2024, arxiv="2408.08696", venue="ACL 2025")
SAXENA_2023 = Paper("Prompt Lookup Decoding", "Saxena", 2023, venue="GitHub: apoorvumang/prompt-lookup-decoding",
                    note="a repository, not a paper (transformers' prompt_lookup_num_tokens); year not verified offline")
CHENG_2025 = Paper("DEER: Draft with Diffusion, Verify with Autoregressive Models", "Cheng et al.", 2025,
                   arxiv="2512.15176", note="tiny-diffusion drafts the block in one pass; the paper's drafter "
                                            "alignment training is not done here")

YILDIRIM_CHEN_2025 = Paper("SpecMemo: Speculative Decoding is in Your Pocket", "Yildirim and Chen", 2025,
                           arxiv="2506.01986", note="the memory budget (`memory_budget_mb`): the tree is sized by the "
                                                   "bytes it costs; the paper's multi-GPU batched serving is not here")
EBRAHIMI_2024 = Paper("Minimum Entropy Coupling with Bottleneck", "Ebrahimi, Chen and Khisti", 2024, arxiv="2410.21666",
                      venue="NeurIPS 2024",
                      note="MEC-B in the coupling view (decoding/speculative/mecb.py): the greedy deterministic EBIM "
                           "encoder (Algorithm 1) and its uniform baseline, then a greedy minimum-entropy decoder; "
                           "the stochastic refinement near deterministic encoders (Theorem 3) is not done. The rate-"
                           "limited Markov coding game on a 4x4 grid (decoding/speculative/mcg.py)")

# --- inference-time scaling ---------------------------------------------------------------------------
BROWN_2024 = Paper("Large Language Monkeys: Scaling Inference Compute with Repeated Sampling", "Brown et al.", 2024,
                   arxiv="2407.21787", note="repeated sampling; selection by a reward")
BALASHANKAR_2025 = Paper("InfAlign: Inference-aware language model alignment", "Balashankar, Sun et al.", 2025,
                         arxiv="2412.19792", venue="ICML 2025",
                         note="cited for context by best-of-n: the policy aligned FOR best-of-N (calibrate, then the "
                              "exponential transform), computed exactly on a finite support in "
                              "decoding/scaling/infalign.py and the Scaling tab's InfAlign accordion; no model is "
                              "trained (twelve authors; Balashankar and Sun equal contribution)")
HALDER_2025 = Paper("Demystifying LLM-as-a-Judge: Analytically Tractable Model for Inference-Time Scaling",
                    "Halder and Pehlevan", 2025, arxiv="2512.19905",
                    note="cited for context by best-of-n: k candidates, one kept by softmax(score / T) of a "
                         "misspecified judge; its finite optimal k computed exactly on finite candidate laws in "
                         "decoding/scaling/judge.py (our reading; the paper's high-dimensional regression closed "
                         "forms are not reproduced) and measured on tiny-math (bench/bench_judge.py)")
WANG_2023 = Paper("Self-Consistency Improves Chain of Thought Reasoning in Language Models", "Wang et al.", 2023,
                  arxiv="2203.11171", venue="ICLR 2023", note="majority vote over final answers")
SNELL_2024 = Paper("Scaling LLM Test-Time Compute Optimally can be More Effective than Scaling Model Parameters",
                   "Snell, Lee, Xu and Kumar", 2024, arxiv="2408.03314", note="beam search guided by a process reward")
PURI_2025 = Paper("A Probabilistic Inference Approach to Inference-Time Scaling of LLMs using Particle-Based Monte "
                  "Carlo Methods", "Puri et al.", 2025, arxiv="2502.01618",
                  note="particle filtering with softmax(logit(r)) weights; a rule or an LM judge stands in for the PRM")
GIANNONE_2025 = Paper("Mitigating Premature Exploitation in Particle-based Monte Carlo for Inference-Time Scaling",
                      "Giannone et al.", 2025, arxiv="2510.05825",
                      note="ePF: `annealing` is Entropic Annealing as the authors' its_hub code writes it; `entropic` "
                           "(budget-free) and `lookahead` (Look-ahead Modulation, whose formula was not read and which "
                           "its_hub leaves unimplemented) are the project's own variants")
LEW_2023 = Paper("Sequential Monte Carlo Steering of Large Language Models using Probabilistic Programs", "Lew et al.",
                 2023, arxiv="2306.03081", note="hard constraints (weight 0, tokens masked); ESS-triggered resampling")
AGARWAL_2025 = Paper("First Finish Search: Efficient Test-Time Scaling in Large Language Models",
                     "Agarwal, Sengupta and Chakraborty", 2025, arxiv="2505.18149")
CHATZIVEROGLOU_2025 = Paper("A*-Decoding: Token-Efficient Inference Scaling", "Chatziveroglou", 2025,
                            arxiv="2505.13672", note="h = 1 - r as in the paper; the priority f = max(1 - r) over checked "
                                                     "steps is the project's own variant (the paper's path cost g "
                                                     "could not be read)")
MADAAN_2023 = Paper("Self-Refine: Iterative Refinement with Self-Feedback", "Madaan et al.", 2023, arxiv="2303.17651",
                    note="refine's feedback=prefix, in its spirit: the critique is replaced by the step reward")
CHAKRABORTY_2025 = Paper("Review, Refine, Repeat: Understanding Iterative Decoding of AI Agents with Dynamic Evaluation "
                         "and Selection", "Chakraborty et al.", 2025, arxiv="2504.01931",
                         note="Iterative Agent Decoding (v4 retitled \"On the Role of Feedback in Test-Time Scaling of "
                              "Agentic AI Workflows\"); only the abstract and summaries were read: tiny-math cannot read "
                              "a textual critique, so the verdict goes back as forced tokens (the verified steps and the "
                              "checker's corrected step); selection: the best over all rounds")
PAN_2025 = Paper("SpecReason: Fast and Accurate Inference-Time Compute via Speculative Reasoning", "Pan et al.", 2025,
                 arxiv="2504.07891", venue="NeurIPS 2025",
                 note="the step gate: a drafted step is kept when the step reward reaches a fixed `accept` (SpecReason's "
                      "judge is the large model itself)")
MAHESWARAN_2025 = Paper("Arbitrage: Efficient Reasoning via Advantage-Aware Speculation", "Maheswaran et al.", 2025,
                        arxiv="2512.05033",
                        note="step-speculation's gate=oracle (both steps written, the better by a margin kept) and "
                             "gate=router (trained on the oracle's choices); the router is a small MLP on the drafter's "
                             "confidence and the draft's reward, not the paper's fine-tuned 1.5B PRM")
SAAD_FALCON_2024 = Paper("Archon: An Architecture Search Framework for Inference-Time Techniques", "Saad-Falcon et al.",
                         2024, arxiv="2409.15254",
                         venue="ICML 2025 (PMLR 267, as \"An Architecture Search Framework for Inference-Time Techniques\")",
                         note="its search (ITAS: Bayesian optimisation over layers of techniques, configurations over a "
                              "budget left out) over compositions of the lab's own strategies, the budget being tokens "
                              "measured on validation problems; no LLM fuser, critic or ranker model")
COBBE_2021 = Paper("Training Verifiers to Solve Math Word Problems", "Cobbe et al.", 2021, arxiv="2110.14168",
                   note="outcome reward on the final answer; GSM8K's answer form")
RIZVI_2025 = Paper("SPARE: Single-Pass Annotation with Reference-Guided Evaluation for Automatic Process Supervision "
                   "and Reward Modelling", "Rizvi, Zhu and Gurevych", 2025, arxiv="2506.15498",
                   note="reward spare: a rule matches each step with the reference solution's step (the paper has an "
                        "LLM annotate the alignment); reward spare-prm: a PRM trained on those labels, a small head on "
                        "the policy's forward pass (the paper fine-tunes an LLM), used with no reference")
MANVI_2024 = Paper("Adaptive Inference-Time Compute: LLMs Can Predict if They Can Do Better, Even Mid-Generation",
                   "Manvi, Singh and Ermon", 2024, arxiv="2410.02725",
                   note="strategy adaptive (waves of samples stopped and pruned by an evaluator), reward self-eval "
                        "and its fine-tuning recipe; the token trained on tiny-math did not discriminate, so the "
                        "default evaluator is the arithmetic checker; temperature annealing is not reproduced")
LIU_CHAO_2025 = Paper("Bag of Tricks for Inference-time Computation of LLM Reasoning", "Liu, Chao, Tan and Liu", 2025,
                      arxiv="2502.07191", note="its findings reproduced on tiny-math: the temperature / top-p sweep "
                                               "(bench_scaling --sweep) and a weak self-evaluation (the probe)")
WANG_J_2025 = Paper("Think Deep, Think Fast: Investigating Efficiency of Verifier-free Inference-time-scaling Methods",
                    "Wang et al.", 2025, arxiv="2504.14047",
                    note="verifier-free methods (majority vote) and its length signal: `shortest` votes among the "
                         "shorter answers only")
ZHANG_2025 = Paper("The Lessons of Developing Process Reward Models in Mathematical Reasoning", "Zhang et al.", 2025,
                   arxiv="2501.07301", note="Qwen2.5-Math-PRM, the hub PRM's default")

# --- masked diffusion LMs -------------------------------------------------------------------------------
SAHOO_2024 = Paper("Simple and Effective Masked Diffusion Language Models", "Sahoo et al.", 2024, arxiv="2406.07524",
                   note="MDLM: the masked diffusion objective and sampler")
NIE_2025 = Paper("Large Language Diffusion Models", "Nie et al.", 2025, arxiv="2502.09992",
                 note="LLaDA: scheduled transfers, low-confidence remasking, semi-autoregressive blocks")
YE_2025 = Paper("Dream 7B: Diffusion Large Language Models", "Ye et al.", 2025, arxiv="2508.15487",
                note="margin and entropy remasking; the logit shift")
WU_2025 = Paper("Fast-dLLM: Training-free Acceleration of Diffusion LLM by Enabling KV Cache and Parallel Decoding",
                "Wu et al.", 2025, arxiv="2505.22618", note="confidence-threshold parallel decoding")
KONG_2025 = Paper("Accelerating Diffusion LLM Inference via Local Determinism Propagation", "Kong et al.", 2025,
                  arxiv="2510.07081", note="LocalLeap; decay=none is the rule of its reference code (flat window "
                                                    "of radius positions); decay=linear is the project's own variant")
WU_ZHANG_2025 = Paper("Free Draft-and-Verification: Toward Lossless Parallel Decoding for Diffusion Large Language "
                      "Models", "Wu and Zhang", 2025, arxiv="2510.00294", note="FreeDave")
MA_2025 = Paper("dKV-Cache: The Cache for Diffusion Language Models", "Ma et al.", 2025, arxiv="2505.15781",
                note="delayed key / value caching")
BAO_2025 = Paper("Learning to Parallel: Accelerating Diffusion Large Language Models via Adaptive Parallel Decoding",
                 "Bao et al.", 2025, note="Learn2PD; " + NOT_VERIFIED)
KANG_2025 = Paper("ParallelBench: Understanding the Trade-offs of Parallel Decoding in Diffusion LLMs", "Kang et al.",
                  2025, arxiv="2510.04767", note="the spirit of tiny-parallel's list tasks (texts and generator ours)")

# --- models trained here ------------------------------------------------------------------------------------
CARLSSON_2024 = Paper("The Hyperfitting Phenomenon: Sharpening and Stabilizing LLMs for Open-Ended Text Generation",
                      "Carlsson et al.", 2024, note=NOT_VERIFIED)

# --- streaming speech (issue 32) ----------------------------------------------------------------------------
RADFORD_2022 = Paper("Robust Speech Recognition via Large-Scale Weak Supervision", "Radford et al.", 2022,
                     arxiv="2212.04356", venue="ICML 2023", note="Whisper; base here, from a CTranslate2 conversion")
MACHACEK_2023 = Paper("Turning Whisper into Real-Time Transcription System", "Macháček, Dabre and Bojar", 2023,
                      arxiv="2307.14743", venue="IJCNLP-AACL 2023 (demo)",
                      note="Whisper-Streaming's LocalAgreement-2; the committed text is the decoder's forced prefix "
                           "here (whisper-streaming matches it through word timestamps)")
KRICHLI_2025 = Paper("CarelessWhisper: Turning Whisper into a Causal Streaming Model", "Krichli, Raj and Keshet",
                     2025, arxiv="2508.12301", note="the chunk-causal encoder (LoRA) and its commit rule, read from the "
                                                    "abstract and the authors' released code; arXiv v2 (2026) is "
                                                    "retitled \"WhisperRT: Turning Whisper into a Causal Streaming "
                                                    "Model\"")
HU_2021 = Paper("LoRA: Low-Rank Adaptation of Large Language Models", "Hu et al.", 2021, arxiv="2106.09685",
                venue="ICLR 2022", note="the adapters of CarelessWhisper's encoder and decoder attention")
# --- long context (issue 28) ----------------------------------------------------------------------------------
YUE_2024 = Paper("Inference Scaling for Long-Context Retrieval Augmented Generation", "Yue et al.", 2024,
                 arxiv="2410.04343", venue="ICLR 2025", note="DRAG and IterDRAG (strategy rag); BM25 retrieval over the "
                                                             "prompt's own context here, not the paper's web corpus")
CHEN_2025_RAPID = Paper("Long-Context Inference with Retrieval-Augmented Speculative Decoding", "Chen et al.", 2025,
                        arxiv="2502.20330", venue="ICML 2025",
                        note="RAPID (drafter rapid): a RAG drafter on retrieved chunks for a long-context target; the "
                             "retrieval-augmented target distribution is the lossy option")
YANG_2025_LONGSPEC = Paper("LongSpec: Long-Context Lossless Speculative Decoding with Efficient Drafting and "
                           "Verification", "Yang et al.", 2025, arxiv="2502.17421",
                           note="the authors' repository titles it \"LongSpec: Long-Context Speculative Decoding with "
                                "Efficient Drafting and Verification\"; drafter longspec (its hybrid tree attention "
                                "kernel is not built)")
DU_2024_GLIDE = Paper("GliDe with a CaPE: A Low-Hassle Method to Accelerate Speculative Decoding", "Du et al.", 2024,
                      venue="ICML 2024 (PMLR 235)", note="the draft layer's cross-attention on the target's cached keys "
                                                          "and values, which LongSpec builds on")
XIAO_2024_SINKS = Paper("Efficient Streaming Language Models with Attention Sinks", "Xiao, Tian, Chen, Han and Lewis",
                        2024, arxiv="2309.17453", venue="ICLR 2024",
                        note="the first positions kept beside a sliding window (the longspec draft's own cache)")
BANSAL_2025 = Paper("Let's (not) just put things in Context: Test-Time Training for Long-Context LLMs", "Bansal et al.",
                    2025, arxiv="2512.13898", venue="ICLR 2026",
                    note="query-only test-time training (qTTT): strategy ttt (mode train), and its FLOP-matched "
                         "thinking baseline (mode think); the paper's learning rate and optimizer were not in what "
                         "could be read offline (Adam, lr 1e-3 here)")
ROBERTSON_2009 = Paper("The Probabilistic Relevance Framework: BM25 and Beyond", "Robertson and Zaragoza", 2009,
                       venue="Foundations and Trends in Information Retrieval 3(4)",
                       note="Okapi BM25, the shipped retriever (Lucene's idf)")
