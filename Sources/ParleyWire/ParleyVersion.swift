/// The version both programs report and the client sends in its join.
public enum ParleyVersion {
    public static let string = "0.1.0"
    /// "parley/0.1.0", the software string of a join.
    public static let software = "parley/\(string)"
}
