//! Unit tests of [`super::demangle`]: each C++ fix with c++filt's text for its case.
use super::demangle;

#[test]
fn forms() {
    assert_eq!(demangle("work"), "work");
    assert_eq!(demangle("_ZN3foo3barE"), "foo::bar");
    assert_eq!(
        demangle("_ZN4core3fmt5write17h0123456789abcdefE"),
        "core::fmt::write"
    );
    assert_eq!(demangle("_Z5outeri"), "outer(int)");
}

#[test]
fn integer_literals_as_cxxfilt_writes_them() {
    // `template<unsigned, long, bool, long long, unsigned long long, char, int> void f()`.
    assert_eq!(
        demangle("_Z1fILj3ELln5ELb1ELx7ELy8ELc65ELin2EEvv"),
        "void f<3u, -5l, true, 7ll, 8ull, (char)65, -2>()"
    );
    assert_eq!(
        demangle("_ZN2nn6detail29vectorized_elementwise_kernelILi4ENS0_10AddFunctorIfEESt5arrayIPcLm2EEEEviT0_T1_"),
        "void nn::detail::vectorized_elementwise_kernel<4, nn::detail::AddFunctor<float>, std::array<char*, 2ul> >(int, nn::detail::AddFunctor<float>, std::array<char*, 2ul>)"
    );
    // Malformed literals are left as cpp_demangle writes them.
    assert_eq!(demangle("_Z1fILm0x10EEvv"), "void f<(unsigned long)0x10>()");
    // Parameter lists are not literals.
    assert_eq!(demangle("_Z1gmx"), "g(unsigned long, long long)");
    assert_eq!(demangle("_ZN1SclEm"), "S::operator()(unsigned long)");
}

#[test]
fn user_defined_literal_operators_as_cxxfilt_writes_them() {
    for (mangled, shown) in [
        ("_Zli3_msy", "operator\"\" _ms(unsigned long long)"),
        ("_ZN2nsli3_msEy", "ns::operator\"\" _ms(unsigned long long)"),
        ("_Zli4_fooPKcm", "operator\"\" _foo(char const*, unsigned long)"),
    ] {
        assert_eq!(demangle(mangled), shown, "{mangled}");
    }
}

/// c++filt's text (binutils 2.40) of each of `cases`.
fn assert_as_cxxfilt(cases: &[(&str, &str)]) {
    for (mangled, shown) in cases {
        assert_eq!(demangle(mangled), *shown, "{mangled}");
    }
}

/// Function parameter packs: the pattern's `const&` or `&&` on each element, none for an empty pack.
#[test]
fn parameter_packs_take_their_pattern_on_each_element() {
    assert_as_cxxfilt(&[
        (
            "_ZN4llvm12hash_combineIJhhjEEENS_9hash_codeEDpRKT_",
            "llvm::hash_code llvm::hash_combine<unsigned char, unsigned char, unsigned int>(unsigned char const&, unsigned char const&, unsigned int const&)",
        ),
        (
            "_ZNSt6vectorIN4llvm8AsmTokenESaIS1_EE17_M_realloc_insertIJNS1_9TokenKindENS0_9StringRefEEEEvN9__gnu_cxx17__normal_iteratorIPS1_S3_EEDpOT_",
            "void std::vector<llvm::AsmToken, std::allocator<llvm::AsmToken> >::_M_realloc_insert<llvm::AsmToken::TokenKind, llvm::StringRef>(__gnu_cxx::__normal_iterator<llvm::AsmToken*, std::vector<llvm::AsmToken, std::allocator<llvm::AsmToken> > >, llvm::AsmToken::TokenKind&&, llvm::StringRef&&)",
        ),
        (
            "_ZNSt5dequeIN4llvm11SmallStringILj32EEESaIS2_EE16_M_push_back_auxIJEEEvDpOT_",
            "void std::deque<llvm::SmallString<32u>, std::allocator<llvm::SmallString<32u> > >::_M_push_back_aux<>()",
        ),
        (
            "_ZSt11make_uniqueIN4llvm7jitlink9LinkGraphEJNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEENS0_6TripleEiNS0_7support10endiannessEPFPKchEEENSt8__detail9_MakeUniqIT_E15__single_objectEDpOT0_",
            "std::__detail::_MakeUniq<llvm::jitlink::LinkGraph>::__single_object std::make_unique<llvm::jitlink::LinkGraph, std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> >, llvm::Triple, int, llvm::support::endianness, char const* (*)(unsigned char)>(std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> >&&, llvm::Triple&&, int&&, llvm::support::endianness&&, char const* (*&&)(unsigned char))",
        ),
        (
            "_ZN4llvm22containsIrreducibleCFGIPKNS_10BasicBlockEKNS_25ReversePostOrderTraversalIPKNS_8FunctionENS_11GraphTraitsIS7_EEEEKNS_8LoopInfoENS8_IS3_EEEEbRT0_RKT1_",
            "bool llvm::containsIrreducibleCFG<llvm::BasicBlock const*, llvm::ReversePostOrderTraversal<llvm::Function const*, llvm::GraphTraits<llvm::Function const*> > const, llvm::LoopInfo const, llvm::GraphTraits<llvm::BasicBlock const*> >(llvm::ReversePostOrderTraversal<llvm::Function const*, llvm::GraphTraits<llvm::Function const*> > const&, llvm::LoopInfo const&)",
        ),
    ]);
}

/// An empty template argument pack: `AnalysisManager<Module>`, not `AnalysisManager<Module, >`.
#[test]
fn empty_template_argument_packs_leave_no_separator() {
    assert_as_cxxfilt(&[
        (
            "_ZN4llvm10IPSCCPPass3runERNS_6ModuleERNS_15AnalysisManagerIS1_JEEE",
            "llvm::IPSCCPPass::run(llvm::Module&, llvm::AnalysisManager<llvm::Module>&)",
        ),
        (
            "_ZN4llvm11PassBuilder15parseModulePassERNS_11PassManagerINS_6ModuleENS_15AnalysisManagerIS2_JEEEJEEERKNS0_15PipelineElementE",
            "llvm::PassBuilder::parseModulePass(llvm::PassManager<llvm::Module, llvm::AnalysisManager<llvm::Module>>&, llvm::PassBuilder::PipelineElement const&)",
        ),
    ]);
}

/// A reference, pointer or `const`, or a function's parameters, after the whole nested name.
#[test]
fn qualifiers_follow_the_whole_nested_name() {
    assert_as_cxxfilt(&[
        (
            "_ZNK10__cxxabiv120__si_class_type_info11__do_upcastEPKNS_17__class_type_infoEPKvRNS1_15__upcast_resultE",
            "__cxxabiv1::__si_class_type_info::__do_upcast(__cxxabiv1::__class_type_info const*, void const*, __cxxabiv1::__class_type_info::__upcast_result&) const",
        ),
        (
            "_ZN4llvm6object19getSecIndexForErrorINS0_7ELFTypeILNS_7support10endiannessE0ELb0EEEEENSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEERKNS0_7ELFFileIT_EERKNSD_4ShdrE",
            "std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> > llvm::object::getSecIndexForError<llvm::object::ELFType<(llvm::support::endianness)0, false> >(llvm::object::ELFFile<llvm::object::ELFType<(llvm::support::endianness)0, false> > const&, llvm::object::ELFType<(llvm::support::endianness)0, false>::Shdr const&)",
        ),
        (
            "_ZN4llvm25getUniqueExitBlocksHelperINS_10BasicBlockENS_8LoopBaseIS1_NS_4LoopEEEZNKS4_19getUniqueExitBlocksERNS_15SmallVectorImplIPS1_EEEUlPKS1_E_EEvPKT0_RNS5_IPT_EET1_",
            "void llvm::getUniqueExitBlocksHelper<llvm::BasicBlock, llvm::LoopBase<llvm::BasicBlock, llvm::Loop>, llvm::LoopBase<llvm::BasicBlock, llvm::Loop>::getUniqueExitBlocks(llvm::SmallVectorImpl<llvm::BasicBlock*>&) const::{lambda(llvm::BasicBlock const*)#1}>(llvm::LoopBase<llvm::BasicBlock, llvm::Loop> const*, llvm::SmallVectorImpl<llvm::BasicBlock*>&, llvm::LoopBase<llvm::BasicBlock, llvm::Loop>::getUniqueExitBlocks(llvm::SmallVectorImpl<llvm::BasicBlock*>&) const::{lambda(llvm::BasicBlock const*)#1})",
        ),
    ]);
}

/// A symbol version after the demangled name, as c++filt keeps it.
#[test]
fn symbol_versions_are_kept_after_the_name() {
    assert_as_cxxfilt(&[
        (
            "_ZNSt18condition_variable4waitERSt11unique_lockISt5mutexE@GLIBCXX_3.4.11",
            "std::condition_variable::wait(std::unique_lock<std::mutex>&)@GLIBCXX_3.4.11",
        ),
        ("_ZN3foo3barE@@V_1", "foo::bar@@V_1"),
    ]);
}

/// `Ss` and `So` in full, their constructors and destructors by the template's name.
#[test]
fn standard_abbreviations_in_full() {
    assert_as_cxxfilt(&[
        (
            "_ZNKSs11_M_disjunctEPKc",
            "std::basic_string<char, std::char_traits<char>, std::allocator<char> >::_M_disjunct(char const*) const",
        ),
        (
            "_ZNSoC1Ev",
            "std::basic_ostream<char, std::char_traits<char> >::basic_ostream()",
        ),
        (
            "_ZNSsD2Ev",
            "std::basic_string<char, std::char_traits<char>, std::allocator<char> >::~basic_string()",
        ),
        (
            "_ZNSolsEDn",
            "std::basic_ostream<char, std::char_traits<char> >::operator<<(decltype(nullptr))",
        ),
    ]);
}

/// Thunks; constructor templates keep their first parameter.
#[test]
fn thunks_and_constructor_templates() {
    assert_as_cxxfilt(&[
        (
            "_ZThn16_NSdD0Ev",
            "non-virtual thunk to std::basic_iostream<char, std::char_traits<char> >::~basic_iostream()",
        ),
        (
            "_ZTv0_n24_NSdD1Ev",
            "virtual thunk to std::basic_iostream<char, std::char_traits<char> >::~basic_iostream()",
        ),
        (
            "_ZNSsC1IPcEET_S1_RKSaIcE",
            "std::basic_string<char, std::char_traits<char>, std::allocator<char> >::basic_string<char*>(char*, char*, std::allocator<char> const&)",
        ),
    ]);
}

/// A function type's space; a local function's return type; callees and negations.
#[test]
fn function_types_and_expressions() {
    assert_as_cxxfilt(&[
        (
            "_ZN4llvm11InlinerPass13printPipelineERNS_11raw_ostreamENS_12function_refIFNS_9StringRefES4_EEE",
            "llvm::InlinerPass::printPipeline(llvm::raw_ostream&, llvm::function_ref<llvm::StringRef (llvm::StringRef)>)",
        ),
        (
            "_ZSt16__insertion_sortIPN4llvm3cfg6UpdateIPNS0_10BasicBlockEEEN9__gnu_cxx5__ops15_Iter_comp_iterIZNS1_15LegalizeUpdatesIS4_EEvNS0_8ArrayRefINS2_IT_EEEERNS0_15SmallVectorImplISD_EEbbEUlRKS5_SJ_E_EEEvSC_SC_T0_",
            "void std::__insertion_sort<llvm::cfg::Update<llvm::BasicBlock*>*, __gnu_cxx::__ops::_Iter_comp_iter<llvm::cfg::LegalizeUpdates<llvm::BasicBlock*>(llvm::ArrayRef<llvm::cfg::Update<llvm::BasicBlock*> >, llvm::SmallVectorImpl<llvm::cfg::Update<llvm::BasicBlock*> >&, bool, bool)::{lambda(llvm::cfg::Update<llvm::BasicBlock*> const&, llvm::cfg::Update<llvm::BasicBlock*> const&)#1}> >(llvm::cfg::Update<llvm::BasicBlock*>*, llvm::cfg::Update<llvm::BasicBlock*>*, __gnu_cxx::__ops::_Iter_comp_iter<llvm::cfg::LegalizeUpdates<llvm::BasicBlock*>(llvm::ArrayRef<llvm::cfg::Update<llvm::BasicBlock*> >, llvm::SmallVectorImpl<llvm::cfg::Update<llvm::BasicBlock*> >&, bool, bool)::{lambda(llvm::cfg::Update<llvm::BasicBlock*> const&, llvm::cfg::Update<llvm::BasicBlock*> const&)#1}>)",
        ),
        (
            "_ZN4llvm17make_filter_rangeIRNS_10BasicBlockESt8functionIFbRNS_11InstructionEEEEENS_14iterator_rangeINS_20filter_iterator_implIDTclsr3stdE5beginclsr3stdE7declvalIRT_EEEET0_NS_6detail15fwd_or_bidi_tagISC_E4typeEEEEEOSA_SD_",
            "llvm::iterator_range<llvm::filter_iterator_impl<decltype (std::begin((std::declval<llvm::BasicBlock&>)())), std::function<bool (llvm::Instruction&)>, llvm::detail::fwd_or_bidi_tag<decltype (std::begin((std::declval<llvm::BasicBlock&>)()))>::type> > llvm::make_filter_range<llvm::BasicBlock&, std::function<bool (llvm::Instruction&)> >(llvm::BasicBlock&, std::function<bool (llvm::Instruction&)>)",
        ),
        (
            "_ZN4llvm7reverseINS_14iterator_rangeINS_20filter_iterator_implINS_14ilist_iteratorINS_12ilist_detail12node_optionsINS_11InstructionELb0ELb0EvEELb0ELb0EEESt8functionIFbRS6_EESt26bidirectional_iterator_tagEEEEEEDaOT_PNSt9enable_ifIXntsr10has_rbeginISG_EE5valueEvE4typeE",
            "auto llvm::reverse<llvm::iterator_range<llvm::filter_iterator_impl<llvm::ilist_iterator<llvm::ilist_detail::node_options<llvm::Instruction, false, false, void>, false, false>, std::function<bool (llvm::Instruction&)>, std::bidirectional_iterator_tag> > >(llvm::iterator_range<llvm::filter_iterator_impl<llvm::ilist_iterator<llvm::ilist_detail::node_options<llvm::Instruction, false, false, void>, false, false>, std::function<bool (llvm::Instruction&)>, std::bidirectional_iterator_tag> >&&, std::enable_if<!has_rbegin<llvm::iterator_range<llvm::filter_iterator_impl<llvm::ilist_iterator<llvm::ilist_detail::node_options<llvm::Instruction, false, false, void>, false, false>, std::function<bool (llvm::Instruction&)>, std::bidirectional_iterator_tag> > >::value, void>::type*)",
        ),
    ]);
}
