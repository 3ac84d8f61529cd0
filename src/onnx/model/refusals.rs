//! Refusals that help. What lipfp does not read is refused naming the node, its op type and the
//! supported set, with the reason (what lipfp certifies and why this op or use falls outside it)
//! and, where one is known, the cure: the exact command that cuts a classifier head lipfp does
//! not read off at the logits, what to export instead of another activation or a convolution,
//! the command that inlines model-local functions.

use std::path::PathBuf;

use super::builder::{Builder, Stage, Value};
use super::heads::ML_DOMAIN;
use super::ops::supported_ops;
use crate::error::LipfpError;
use crate::onnx::reader::proto;

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

impl Builder<'_> {
    /// The refusal of `node`, whose op (in its domain) lipfp does not read.
    pub(super) fn refuse(&self, node: &proto::NodeProto, label: &str) -> LipfpError {
        let op = node.op_type.as_str();
        let why = match node.domain.as_str() {
            "" | "ai.onnx" => self.why_default_op(node),
            ML_DOMAIN if op == "ZipMap" => self.why_head(node),
            ML_DOMAIN => "ai.onnx.ml ops belong to classical machine-learning pipelines \
                (skl2onnx, onnxmltools); only the default ONNX domain is supported"
                .to_string(),
            "com.microsoft" => "an onnxruntime contrib op, as onnxruntime writes a graph it has \
                optimised; only the default ONNX domain is supported: certify the model as \
                exported, before onnxruntime's graph optimisations"
                .to_string(),
            _ => "only the default ONNX domain is supported".to_string(),
        };
        LipfpError::unsupported(self.path, label, &qualified_op(node), &why, supported_ops())
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
    /// (see `refuse_constant_step`) or an operation the chain of layers cannot hold.
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
            (1, Some(_)) => format!(
                "{op} reads the activation and an operand that is not a float constant of one \
                 value or one per feature; lipfp reads elementwise steps with such constants only"
            ),
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
            supported_ops(),
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
            supported_ops(),
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

    /// A graph whose output layer has a ReLU followed by a head.
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
                "the output layer has a ReLU followed by a classifier head; lipfp reads a ReLU \
                 output (the zero floor as one more class) or a head on the logits, not both"
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
}

/// The op of `node` as messages name it: `domain:op` outside the default domain.
fn qualified_op(node: &proto::NodeProto) -> String {
    if node.domain.is_empty() || node.domain == "ai.onnx" {
        node.op_type.clone()
    } else {
        format!("{}:{}", node.domain, node.op_type)
    }
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
}
