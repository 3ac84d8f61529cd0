//! Refusals that help. What lipfp does not read is refused naming the node, its op type and the
//! supported set, with the reason (what lipfp certifies and why this op or use falls outside it)
//! and, where one is known, the cure: the exact command that cuts a classifier head off at the
//! logits or a normalisation off the input, how to fold an elementwise affine step or a
//! BatchNormalization into a dense layer, the command that inlines model-local functions.

use std::path::PathBuf;

use super::builder::{Act, Builder, Stage, Value};
use super::heads::ML_DOMAIN;
use super::shapes::Dim;
use crate::error::LipfpError;
use crate::format::Format;
use crate::onnx::proto;
use crate::onnx_checks::node_label;

/// Classifier heads that read the logits and output probabilities or a label.
const HEADS: [&str; 4] = ["Softmax", "LogSoftmax", "ArgMax", "Hardmax"];

/// Activations other than ReLU.
const OTHER_ACTIVATIONS: [&str; 15] = [
    "Sigmoid",
    "Tanh",
    "LeakyRelu",
    "PRelu",
    "Elu",
    "Selu",
    "Celu",
    "Gelu",
    "Softplus",
    "Softsign",
    "HardSigmoid",
    "HardSwish",
    "Mish",
    "ThresholdedRelu",
    "Clip",
];

/// Pooling layers (of convolutional networks).
const POOLING: [&str; 5] = [
    "MaxPool",
    "AveragePool",
    "GlobalAveragePool",
    "GlobalMaxPool",
    "LpPool",
];

/// The ops an input normalisation is made of (elementwise affine steps with constants).
const NORMALISATION_OPS: [&str; 6] = ["Sub", "Div", "Mul", "Add", "BatchNormalization", "Scaler"];

impl Builder<'_> {
    /// The refusal of `node`, whose op (in its domain) lipfp does not read.
    pub(super) fn refuse(&self, node: &proto::NodeProto, label: &str) -> LipfpError {
        let op = node.op_type.as_str();
        let why = match node.domain.as_str() {
            "" | "ai.onnx" => self.why_default_op(node),
            ML_DOMAIN if op == "ZipMap" => self.why_head(node),
            ML_DOMAIN if op == "Scaler" => return self.refuse_step_on(node, label),
            ML_DOMAIN => "ai.onnx.ml ops belong to classical machine-learning pipelines \
                (skl2onnx, onnxmltools); only the default ONNX domain is supported"
                .to_string(),
            "com.microsoft" => "an onnxruntime contrib op, as onnxruntime writes a graph it has \
                optimised; only the default ONNX domain is supported: certify the model as \
                exported, before onnxruntime's graph optimisations"
                .to_string(),
            _ => "only the default ONNX domain is supported".to_string(),
        };
        LipfpError::unsupported(self.path, label, &qualified_op(node), &why)
    }

    /// Why a default-domain op lipfp does not read is refused.
    fn why_default_op(&self, node: &proto::NodeProto) -> String {
        let op = node.op_type.as_str();
        match op {
            _ if HEADS.contains(&op) => self.why_head(node),
            "Sigmoid" if self.is_single_logit(node) => self.why_sigmoid_head(node),
            _ if OTHER_ACTIVATIONS.contains(&op) => format!(
                "{op} is an activation lipfp does not model: its certificates are for networks with \
                 ReLU after the hidden layers and no activation after the output layer; retrain \
                 with ReLU activations"
            ),
            "Conv" | "ConvTranspose" => format!(
                "{op} is a convolutional layer; lipfp certifies dense (fully connected) ReLU \
                 networks only. A convolution is linear, so an equivalent dense layer exists (its \
                 unrolled matrix, practical for small inputs only): deploy and certify the model \
                 with that layer instead"
            ),
            _ if POOLING.contains(&op) => format!(
                "{op} is a pooling layer of a convolutional network; lipfp certifies dense (fully \
                 connected) ReLU networks only"
            ),
            "Sub" | "Mul" | "Div" | "BatchNormalization" => self.why_elementwise(node),
            _ => "this op is not part of a dense ReLU classifier".to_string(),
        }
    }

    /// A classifier head: cut off at the logits it reads, when it reads them.
    fn why_head(&self, node: &proto::NodeProto) -> String {
        let op = node.op_type.as_str();
        let input = node.input.first().map(String::as_str).unwrap_or("");
        if !self.is_logits(input) {
            return format!(
                "{op} is a classifier head; lipfp certifies the logits of a dense ReLU network, \
                 and a head can be cut off only directly after them (the last dense layer's \
                 output, without ReLU), but its input `{input}` is not the logits"
            );
        }
        format!(
            "{op} after the logits `{input}` is a classifier head lipfp does not read: it reads \
             Softmax and LogSoftmax over the classes, ArgMax, and skl2onnx's ArrayFeatureExtractor \
             and ZipMap of the probabilities, whose class is the logits' arg-max. Cut the model at \
             the logits and certify the cut model: {}",
            self.cut_command(&self.data_input, &[input], "logits")
        )
    }

    /// A Sigmoid on a single logit: the head of a binary classifier.
    fn why_sigmoid_head(&self, node: &proto::NodeProto) -> String {
        let input = node.input.first().map(String::as_str).unwrap_or("");
        format!(
            "Sigmoid on the single logit `{input}` is the head of a binary classifier; lipfp \
             certifies the arg-max of two or more logits. Export the output layer with a second \
             logit fixed at zero (weight rows [0, w], bias [0, b]), whose arg-max is the \
             sigmoid's decision, and without the Sigmoid"
        )
    }

    /// `Sub`, `Mul`, `Div` or `BatchNormalization`: a step with constants on the activation
    /// (see [`Self::refuse_constant_step`]) or an operation the chain of layers cannot hold.
    fn why_elementwise(&self, node: &proto::NodeProto) -> String {
        let op = node.op_type.as_str();
        let values: Vec<Option<&Value>> = node
            .input
            .iter()
            .filter(|i| !i.is_empty())
            .map(|i| self.values.get(i))
            .collect();
        let act = values.iter().find_map(|v| match v {
            Some(Value::Act(a)) => Some(a),
            _ => None,
        });
        let acts = values
            .iter()
            .filter(|v| matches!(v, Some(Value::Act(_))))
            .count();
        let constants = values
            .iter()
            .filter(|v| matches!(v, Some(Value::Weight(_) | Value::Const(_))))
            .count();
        let act_first = matches!(values.first(), Some(Some(Value::Act(_))));
        match (acts, act) {
            (1, Some(_)) if op == "Div" && !act_first => "Div of a constant by the activation \
                is not an affine map: lipfp certifies a single chain of dense layers, which \
                multiply and add only constants to the activation"
                .to_string(),
            (1, Some(a)) if constants + 1 == values.len() => self.why_constant_step(node, a),
            (0, _) if constants == values.len() => format!(
                "{op} of constants: lipfp does not evaluate constant subgraphs; export with \
                 constant folding (torch.onnx.export's do_constant_folding=True, the default) so \
                 that weights are stored as computed"
            ),
            (2.., _) => format!(
                "{op} of two values computed from the network input is not supported: lipfp \
                 certifies a single chain of dense layers, which multiply and add only constants \
                 to the activation"
            ),
            _ => "this op is not part of a dense ReLU classifier".to_string(),
        }
    }

    /// The refusal of an elementwise step with constants on the activation `a`: an `Add` that is
    /// not a layer's bias, or a `Sub`, `Mul`, `Div`, `BatchNormalization` or `Scaler`.
    pub(super) fn refuse_constant_step(
        &self,
        node: &proto::NodeProto,
        label: &str,
        a: &Act,
    ) -> LipfpError {
        let why = self.why_constant_step(node, a);
        LipfpError::unsupported(self.path, label, &qualified_op(node), &why)
    }

    /// [`Self::refuse_constant_step`] for a one-input step (`Scaler`) on its input.
    fn refuse_step_on(&self, node: &proto::NodeProto, label: &str) -> LipfpError {
        match node.input.first().and_then(|i| self.values.get(i)) {
            Some(Value::Act(a)) => self.refuse_constant_step(node, label, a),
            _ => LipfpError::unsupported(
                self.path,
                label,
                &qualified_op(node),
                "this op is not part of a dense ReLU classifier",
            ),
        }
    }

    /// Why an elementwise affine step with constants on the activation `a` is refused, and how
    /// to fold it into a dense layer (or cut it off the input).
    fn why_constant_step(&self, node: &proto::NodeProto, a: &Act) -> String {
        let op = node.op_type.as_str();
        let act_first = node
            .input
            .first()
            .is_some_and(|i| matches!(self.values.get(i), Some(Value::Act(_))));
        let map = affine_map(op, act_first);
        let subject = if op == "Add" {
            "a constant add is supported only as the bias directly after a MatMul without bias; \
             this one"
                .to_string()
        } else {
            format!("{op} with constants")
        };
        match a.stage {
            Stage::Input => self.why_normalisation(node, a, &map),
            Stage::Product | Stage::Biased => {
                let layer = self
                    .layers
                    .last()
                    .and_then(|l| l.nodes.first())
                    .map(String::as_str)
                    .unwrap_or("");
                let fuse = if op == "BatchNormalization" {
                    "; torch.nn.utils.fuse_linear_bn_eval(linear, bn) does this for a Linear \
                     followed by a BatchNorm1d"
                } else {
                    ""
                };
                format!(
                    "{subject} after the dense layer `{layer}` is not supported: \
                     it is an elementwise affine map {map}, so fold it into that layer (weight \
                     diag(a) W, bias a*b + c) and export again{fuse}"
                )
            }
            Stage::Activated => format!(
                "{subject} after a ReLU is not supported: it is an elementwise \
                 affine map {map}, so fold it into the next dense layer (weight W diag(a), bias \
                 b + W c) and export again"
            ),
        }
    }

    /// An elementwise affine step on the network input, written as `map`.
    fn why_normalisation(&self, node: &proto::NodeProto, a: &Act, map: &str) -> String {
        let op = node.op_type.as_str();
        let input = &self.data_input;
        let cut = match self.normalised_tensor(node) {
            Some((at, t)) => match self.head_after(at) {
                Some((label, logits)) => format!(
                    " (with the classifier head `{label}`, at the logits `{logits}`): {}",
                    self.cut_inner_command(t, a, &[logits])
                ),
                None => format!(": {}", self.cut_inner_command(t, a, &self.output_names())),
            },
            None => " (onnx.utils.extract_model)".to_string(),
        };
        format!(
            "{op} with constants on the network input `{input}` is an input normalisation step \
             {map}; lipfp certifies in the model's input space, and normalisation steps are not \
             supported yet. Fold the normalisation into the first layer (weight W diag(a), bias \
             b + W c; the certificate then covers the folded network) or cut it off and certify \
             normalised inputs, with the radius then in the normalised space, not in the input \
             space{cut}"
        )
    }

    /// The run of normalisation steps starting at `node`: the position of its last step in the
    /// graph and the tensor it ends in (`node`'s output, followed through the later nodes
    /// reading it while they are normalisation steps).
    fn normalised_tensor<'n>(&'n self, node: &'n proto::NodeProto) -> Option<(usize, &'n str)> {
        let nodes = &self.graph.node;
        let mut at = nodes.iter().position(|n| std::ptr::eq(n, node))?;
        let mut tensor = node.output.first().filter(|o| !o.is_empty())?.as_str();
        while let Some((k, next)) = nodes
            .iter()
            .enumerate()
            .skip(at + 1)
            .find(|(_, n)| n.input.iter().any(|i| i == tensor))
        {
            match next.output.first().filter(|o| !o.is_empty()) {
                Some(out) if NORMALISATION_OPS.contains(&next.op_type.as_str()) => {
                    (at, tensor) = (k, out.as_str());
                }
                _ => break,
            }
        }
        Some((at, tensor))
    }

    /// The first classifier head after position `at` of the graph, and the tensor it reads (the
    /// logits, unless the graph does more after the normalisation than lipfp reads).
    fn head_after(&self, at: usize) -> Option<(String, &str)> {
        let (index, head) =
            self.graph
                .node
                .iter()
                .enumerate()
                .skip(at + 1)
                .find(|(_, n)| match n.domain.as_str() {
                    "" | "ai.onnx" => HEADS.contains(&n.op_type.as_str()),
                    ML_DOMAIN => n.op_type == "ZipMap",
                    _ => false,
                })?;
        let logits = head.input.first().filter(|i| !i.is_empty())?;
        Some((node_label(head, index), logits.as_str()))
    }

    /// The calling node of a model-local function.
    pub(super) fn refuse_function_call(&self, node: &proto::NodeProto, label: &str) -> LipfpError {
        let code = format!(
            "import onnx, onnx.inliner; onnx.save(onnx.inliner.inline_local_functions(onnx.load({})), {})",
            py_str(&self.path.to_string_lossy()),
            py_str(&self.sibling("inlined").to_string_lossy()),
        );
        LipfpError::unsupported(
            self.path,
            label,
            &node.op_type,
            &format!(
                "model-local functions are not supported; export with functions inlined, or inline \
                 them: {}",
                python_command(&code)
            ),
        )
    }

    /// An `Add` of two activations.
    pub(super) fn refuse_residual_add(&self, label: &str) -> LipfpError {
        LipfpError::unsupported(
            self.path,
            label,
            "Add",
            "adds two activations (residual connections are not supported: lipfp certifies a \
             single chain of dense layers)",
        )
    }

    /// A graph without outputs, or with an output that is neither the logits nor a classifier
    /// head computed from them.
    pub(super) fn refuse_outputs(&self) -> LipfpError {
        let names = self.output_names();
        if names.is_empty() {
            return LipfpError::model(self.path, "the graph has no output");
        }
        let others: Vec<String> = names
            .iter()
            .filter(|n| !matches!(self.values.get(**n), Some(Value::Head(_))) && !self.is_logits(n))
            .map(|n| format!("`{n}`"))
            .collect();
        let mut message = if others.is_empty() {
            format!(
                "the graph has {} outputs and not all are computed from the last layer's logits",
                names.len()
            )
        } else {
            format!(
                "the graph has {} outputs and {} {} neither the logits nor a classifier head \
                 computed from them (Softmax, LogSoftmax, ArgMax, ArrayFeatureExtractor, ZipMap)",
                names.len(),
                others.join(", "),
                if others.len() == 1 { "is" } else { "are" }
            )
        };
        let logits = self
            .graph
            .node
            .iter()
            .flat_map(|n| n.output.iter())
            .chain(self.graph.input.iter().map(|i| &i.name))
            .find(|n| self.is_logits(n));
        if let Some(logits) = logits {
            message.push_str(&format!(
                "; lipfp certifies one output, the logits `{logits}`: keep only it with {}",
                self.cut_command(&self.data_input, &[logits], "logits")
            ));
        }
        LipfpError::model(self.path, message)
    }

    /// A graph whose output layer has a ReLU.
    pub(super) fn refuse_relu_output(&self) -> LipfpError {
        let relu = self
            .layers
            .last()
            .and_then(|l| l.nodes.last().cloned())
            .unwrap_or_default();
        LipfpError::Model {
            path: self.path.to_path_buf(),
            node: Some((relu, "Relu".into())),
            message:
                "the output layer has a ReLU; the certificate needs an identity output (logits)"
                    .into(),
        }
    }

    /// Whether `name` holds the logits: the newest activation, after a layer without ReLU.
    fn is_logits(&self, name: &str) -> bool {
        matches!(
            self.values.get(name),
            Some(Value::Act(a)) if a.id == self.chain_id && matches!(a.stage, Stage::Product | Stage::Biased)
        )
    }

    /// Whether `node` reads logits of a single value per example.
    fn is_single_logit(&self, node: &proto::NodeProto) -> bool {
        let reads_logits = node.input.first().is_some_and(|i| self.is_logits(i));
        reads_logits && self.layers.last().is_some_and(|l| l.m == 1)
    }

    /// The graph's output names.
    fn output_names(&self) -> Vec<&str> {
        self.graph.output.iter().map(|o| o.name.as_str()).collect()
    }

    /// The model file's sibling `<stem>-<suffix>.onnx`.
    fn sibling(&self, suffix: &str) -> PathBuf {
        let stem = self
            .path
            .file_stem()
            .map(|s| s.to_string_lossy())
            .unwrap_or_else(|| "model".into());
        self.path.with_file_name(format!("{stem}-{suffix}.onnx"))
    }

    /// The command that extracts the part of the model from `input` to `outputs` into the
    /// sibling file `<stem>-<suffix>.onnx`.
    fn cut_command(&self, input: &str, outputs: &[&str], suffix: &str) -> String {
        let code = format!(
            "import onnx.utils; onnx.utils.extract_model({}, {}, {}, {})",
            py_str(&self.path.to_string_lossy()),
            py_str(&self.sibling(suffix).to_string_lossy()),
            py_list(&[input]),
            py_list(outputs)
        );
        python_command(&code)
    }

    /// The command that extracts the part of the model from the tensor `input`, which holds
    /// the activation `a` before any layer, to `outputs` into the sibling file
    /// `<stem>-unnormalised.onnx`. Shape inference does not type every tensor (not the output
    /// of an ai.onnx.ml `Scaler`), so the command declares `input` as lipfp reads it.
    fn cut_inner_command(&self, input: &str, a: &Act, outputs: &[&str]) -> String {
        let dims: Vec<String> = a
            .shape
            .iter()
            .map(|d| match d {
                Dim::Batch => "'N'".to_string(),
                Dim::Fixed(k) => k.to_string(),
                Dim::Infer | Dim::Negative(_) => "None".to_string(),
            })
            .collect();
        let elem = match a.elem {
            Format::Float64 => "DOUBLE",
            Format::Float32 => "FLOAT",
            Format::Float16 => "FLOAT16",
            Format::Bfloat16 => "BFLOAT16",
        };
        let code = format!(
            "import onnx, onnx.utils; m = onnx.shape_inference.infer_shapes(onnx.load({})); \
             m.graph.value_info.append(onnx.helper.make_tensor_value_info({}, \
             onnx.TensorProto.{elem}, [{}])); onnx.save(onnx.utils.Extractor(m).extract_model({}, \
             {}), {})",
            py_str(&self.path.to_string_lossy()),
            py_str(input),
            dims.join(", "),
            py_list(&[input]),
            py_list(outputs),
            py_str(&self.sibling("unnormalised").to_string_lossy()),
        );
        python_command(&code)
    }
}

/// The op of `node` as messages name it: `domain:op` outside the default domain.
fn qualified_op(node: &proto::NodeProto) -> String {
    if node.domain.is_empty() || node.domain == "ai.onnx" {
        node.op_type.clone()
    } else {
        format!("{}:{}", node.domain, node.op_type)
    }
}

/// The elementwise affine map `x -> a*x + c` an op with constants computes on the activation
/// `x` (its first operand when `act_first`), as text.
fn affine_map(op: &str, act_first: bool) -> String {
    let (map, a, c) = match op {
        "Sub" if act_first => ("x - m", "1", "-m"),
        "Sub" => ("m - x", "-1", "m"),
        "Add" => ("x + m", "1", "m"),
        "Mul" => ("x * s", "s", "0"),
        "Div" => ("x / s", "1/s", "0"),
        "BatchNormalization" => (
            "scale * (x - mean) / sqrt(var + epsilon) + B",
            "scale / sqrt(var + epsilon)",
            "B - a * mean",
        ),
        "Scaler" => ("(x - offset) * scale", "scale", "-offset * scale"),
        _ => ("x -> a*x + c", "a", "c"),
    };
    format!("({map}: x -> a*x + c with a = {a}, c = {c})")
}

/// `python -c "<code>"` in backticks, `code` quoted for a POSIX shell.
fn python_command(code: &str) -> String {
    let mut quoted = String::from("\"");
    for c in code.chars() {
        if matches!(c, '\\' | '"' | '$' | '`') {
            quoted.push('\\');
        }
        quoted.push(c);
    }
    quoted.push('"');
    format!("`python -c {quoted}`")
}

/// A Python list of the string literals of `names`.
fn py_list(names: &[&str]) -> String {
    let quoted: Vec<String> = names.iter().map(|n| py_str(n)).collect();
    format!("[{}]", quoted.join(", "))
}

/// A Python string literal holding `s`.
fn py_str(s: &str) -> String {
    let mut out = String::from("'");
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\'' => out.push_str("\\'"),
            c if c.is_control() => out.push_str(&format!("\\x{:02x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('\'');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_quoted_for_python_and_the_shell() {
        assert_eq!(py_str("x"), "'x'");
        assert_eq!(py_str("a'b\\c\n"), "'a\\'b\\\\c\\x0a'");
        assert_eq!(python_command("f('$x')"), "`python -c \"f('\\$x')\"`");
        assert_eq!(
            python_command(&py_str("a\"b\\")),
            "`python -c \"'a\\\"b\\\\\\\\'\"`"
        );
    }

    #[test]
    fn every_affine_map_names_a_and_c() {
        for op in NORMALISATION_OPS {
            let map = affine_map(op, true);
            assert!(map.contains("a = ") && map.contains("c = "), "{map}");
        }
        assert!(affine_map("Sub", false).contains("(m - x: x -> a*x + c with a = -1, c = m)"));
    }
}
